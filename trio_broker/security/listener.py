"""What a listener's security protocol asks of its connections: TLS, SASL, or both.

Built once per listener at bind time from the broker's configuration, where every key
may be overridden for one listener as `listener.name.<listener>.<key>` (Kafka's rule),
and a SASL key also as `listener.name.<listener>.<mechanism>.<key>`.
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Any

import attrs

from trio_broker.config import BrokerConfig, ConfigError
from trio_broker.config.listener_overrides import listener_value

if TYPE_CHECKING:
    import ssl

    from trio_broker.security.credentials import SecurityState

logger = logging.getLogger(__name__)

__all__ = ["ListenerSecurity", "listener_value"]

SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


@attrs.frozen(kw_only=True)
class ListenerSecurity:
    listener: str
    protocol: str  # SSL, SASL_PLAINTEXT or SASL_SSL
    ssl_context: ssl.SSLContext | None
    mechanisms: tuple[str, ...]  # SASL mechanisms offered; empty without SASL
    plain_users: dict[str, str]  # PLAIN's users and passwords, from the JAAS config
    reauth_ms: int
    state: SecurityState  # the broker's credential store and authorizer
    principal_rules: Any = None  # ssl.principal.mapping.rules (PrincipalRules), with TLS
    # The ApiVersions handler a connection answers with before it has authenticated
    # (apis/api_versions.py's `handle`), handed in by the broker: this layer stands below
    # the APIs and does not import them.
    api_versions: Any = None

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @classmethod
    def build(
        cls,
        config: BrokerConfig,
        listener: str,
        protocol: str,
        state: SecurityState,
        *,
        api_versions: Any = None,
    ) -> ListenerSecurity:
        context = None
        rules = None
        if protocol in ("SSL", "SASL_SSL"):
            from trio_broker.security.principal_rules import PrincipalRules
            from trio_broker.security.tls import server_context

            context = server_context(config, listener)
            text = listener_value(config, listener, "ssl.principal.mapping.rules")
            try:
                rules = PrincipalRules.parse(text)
            except ValueError as exc:
                raise ConfigError(f"ssl.principal.mapping.rules: {exc}") from None
        mechanisms: tuple[str, ...] = ()
        users: dict[str, str] = {}
        if protocol.startswith("SASL_"):
            enabled = listener_value(config, listener, "sasl.enabled.mechanisms")
            mechanisms = tuple(m.upper() for m in enabled if m.upper() in SASL_MECHANISMS)
            for m in enabled:
                if m.upper() not in SASL_MECHANISMS:
                    logger.warning("SASL mechanism %s is not supported (listener %s)", m, listener)
            if not mechanisms:
                raise ConfigError(
                    f"listener {listener} is {protocol} but sasl.enabled.mechanisms has none "
                    f"of {', '.join(SASL_MECHANISMS)}"
                )
            if "PLAIN" in mechanisms:
                from trio_broker.security.sasl import parse_jaas_users

                jaas = listener_value(config, listener, "sasl.jaas.config", mechanism="PLAIN")
                users = parse_jaas_users(jaas or "")
        return cls(
            listener=listener,
            protocol=protocol,
            ssl_context=context,
            mechanisms=mechanisms,
            plain_users=users,
            reauth_ms=listener_value(config, listener, "connections.max.reauth.ms"),
            state=state,
            principal_rules=rules,
            api_versions=api_versions,
        )

    def connection_factory(self) -> Any:
        """What the processor calls instead of Connection(...) for this listener."""
        from trio_broker.security.connection import SecureConnection

        return functools.partial(SecureConnection, security=self)
