"""trio-broker: a Kafka-wire-compatible message broker on Trio.

Embedding::

    async with trio.open_nursery() as nursery:
        addresses = await nursery.start(trio_broker.serve, config)

or ``async with trio_broker.open_broker(config) as bootstrap: ...``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["BrokerConfig", "open_broker", "serve"]

if TYPE_CHECKING:
    from trio_broker.broker import open_broker, serve
    from trio_broker.config import BrokerConfig


def __getattr__(name: str) -> Any:
    # Imported lazily so that `import trio_broker` (the CLI, the pytest plugin) stays cheap.
    if name in ("serve", "open_broker"):
        from trio_broker import broker

        return getattr(broker, name)
    if name == "BrokerConfig":
        from trio_broker.config import BrokerConfig

        return BrokerConfig
    raise AttributeError(name)
