"""The address of a broker as a client on a given listener must reach it.

A broker with several listeners (PLAINTEXT, SSL, SASL_SSL, ...) tells each client the
address of the listener the client came in on, as Kafka does; otherwise a TLS client
would be sent to the plaintext port. Metadata, FindCoordinator and DescribeCluster ask.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    from trio_broker.broker import Broker

__all__ = ["node_on_listener"]


def node_on_listener(broker: Broker, node: Any, listener: str) -> Any:
    advertised = broker.advertised
    if len(advertised) < 2:
        return node  # the usual case: one listener, the node's own address
    if node.node_id != broker.node_id:
        # Another broker of a cluster: its registration lists its listeners.
        found = next(((h, p) for name, h, p in node.endpoints if name == listener), None)
    else:
        found = next(((a.host, a.port) for a in advertised if a.name == listener), None)
    if found is None or found == (node.host, node.port):
        return node
    return attrs.evolve(node, host=found[0], port=found[1])
