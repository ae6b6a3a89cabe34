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
    if not advertised or advertised[0].name == listener:
        return node  # the usual case: the node already has the first listener's address
    if node.node_id != broker.node_id:
        # Another broker of a cluster: its registration lists its listeners.
        for name, host, port in node.endpoints:
            if name == listener:
                return attrs.evolve(node, host=host, port=port)
        return node
    for lst in advertised:
        if lst.name == listener:
            return attrs.evolve(node, host=lst.host, port=lst.port)
    return node
