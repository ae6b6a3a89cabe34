"""Per-listener overrides: every broker key may be set for one listener as
`listener.name.<listener>.<key>`, and a SASL key also as
`listener.name.<listener>.<mechanism>.<key>` (Kafka's `ListenerName.configPrefix` and
`KafkaConfig.valuesWithPrefixOverride`).

Such keys are not in the key table; BrokerConfig keeps them among its unknown keys, and
this looks them up, parsed and validated as the key they override.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trio_broker.config.keys import ConfigError

if TYPE_CHECKING:
    from trio_broker.config.broker_config import BrokerConfig

__all__ = ["listener_value"]


def listener_value(
    config: BrokerConfig, listener: str, key: str, *, mechanism: str | None = None
) -> Any:
    """`key` for `listener`: its listener.name.* override if set, else the broker's value."""
    prefix = f"listener.name.{listener.lower()}."
    if mechanism is not None:
        text = config.unknown.get(f"{prefix}{mechanism.lower()}.{key}")
        if text is not None:
            return _parse(key, text)
    text = config.unknown.get(prefix + key)
    if text is not None:
        return _parse(key, text)
    return config.value(key)


def _parse(key: str, text: str) -> Any:
    from trio_broker.config.broker_config import broker_config_key

    spec = broker_config_key(key)
    if spec is None:
        return text
    try:
        return spec.convert(text)
    except ValueError as exc:
        raise ConfigError(f"invalid value {text!r} for configuration {key}: {exc}") from None
