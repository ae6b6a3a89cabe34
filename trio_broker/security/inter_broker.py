"""The client configuration a broker's own outgoing connections use (controller to
brokers, followers to leaders, controlled shutdown to the controller), Kafka's way:

- the listener is `inter.broker.listener.name`; without it, the listener named after
  `security.inter.broker.protocol` when that key is set, else the first (advertised)
  listener, as the broker registration (cluster/zookeeper/membership.py) picks the address;
- its security protocol from `listener.security.protocol.map`;
- TLS: the broker's own key store (`ssl.keystore.location`, or `ssl.keystore.key` with
  `ssl.keystore.certificate.chain`, and `ssl.key.password`) is the client certificate,
  its trust store (`ssl.truststore.location` / `ssl.truststore.certificates`) is trusted,
  and `ssl.endpoint.identification.algorithm` decides the hostname check; each key may
  be overridden per listener (`listener.name.<l>.<key>`);
- SASL: `sasl.mechanism.inter.broker.protocol`, with the `username`/`password` of the
  listener's JAAS config for that mechanism
  (`listener.name.<l>.<mechanism>.sasl.jaas.config`, else `sasl.jaas.config`).

A PLAINTEXT inter-broker listener builds a plain ClientConfig and imports nothing else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trio_broker.client.config import ClientConfig

if TYPE_CHECKING:
    from trio_broker.config import BrokerConfig

__all__ = ["inter_broker_client_config", "inter_broker_listener"]


def inter_broker_listener(config: BrokerConfig) -> str | None:
    """The listener name brokers reach each other on (None: no listener at all)."""
    if config.inter_broker_listener_name:
        return config.inter_broker_listener_name.upper()
    listeners = list(config.advertised_listeners or config.listeners)
    if "security.inter.broker.protocol" in config.static_keys:
        wanted = config.security_inter_broker_protocol.upper()
        names = [entry.name for entry in listeners]
        if wanted in names:
            return wanted
        for name in names:
            if config.security_protocol(name) == wanted:
                return name
    return listeners[0].name if listeners else None


def inter_broker_client_config(config: BrokerConfig | None, **kwargs: Any) -> ClientConfig:
    """A ClientConfig for this broker's requests to other brokers; `kwargs` are the
    caller's own client keys (client_id, request_timeout_ms, ...)."""
    listener = inter_broker_listener(config) if config is not None else None
    protocol = config.security_protocol(listener) if config and listener else "PLAINTEXT"
    if protocol == "PLAINTEXT":
        return ClientConfig.build(**kwargs)
    assert config is not None and listener is not None
    from trio_broker.config import ConfigError
    from trio_broker.config.listener_overrides import listener_value

    def get(key: str) -> Any:
        return listener_value(config, listener, key)

    values: dict[str, Any] = {"security_protocol": protocol}
    if protocol in ("SSL", "SASL_SSL"):
        values.update(
            ssl_cafile=get("ssl.truststore.location"),
            ssl_cadata=get("ssl.truststore.certificates"),
            ssl_certfile=get("ssl.keystore.location"),
            ssl_keystore_key=get("ssl.keystore.key"),
            ssl_keystore_certificate_chain=get("ssl.keystore.certificate.chain"),
            ssl_password=get("ssl.key.password"),
            ssl_check_hostname=str(get("ssl.endpoint.identification.algorithm") or "").lower()
            == "https",
        )
    if protocol.startswith("SASL_"):
        from trio_broker.client.config import _jaas_login

        mechanism = str(config.value("sasl.mechanism.inter.broker.protocol")).upper()
        jaas = listener_value(config, listener, "sasl.jaas.config", mechanism=mechanism)
        login = _jaas_login(jaas or "")
        if "sasl_username" not in login or "sasl_password" not in login:
            raise ConfigError(
                f"inter-broker listener {listener} is {protocol} with {mechanism}: "
                f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config "
                'needs username="..." password="..." for the broker\'s own connections'
            )
        values.update(sasl_mechanism=mechanism, **login)
    return ClientConfig.build(**values, **kwargs)
