"""Authentication and authorization: listeners' security protocols, TLS, SASL, the authorizer.

Kafka's `BrokerSecurityConfigs`, `SslConfigs` and `SaslConfigs`, with the authorizer's keys
(`authorizer.class.name` from `ServerConfigs`; `super.users` and
`allow.everyone.if.no.acl.found` of `AclAuthorizer` and `StandardAuthorizer`). They are only
read when a listener is not PLAINTEXT or an authorizer is set; the code is in
trio_broker/security/. Any of these may be given per listener as
listener.name.<listener>.<key>.

The module is named `auth`, not `security`, because it is imported on every start-up and a
plaintext broker imports no module whose name mentions security, TLS, SASL or ACLs
(tests/security/test_tls.py checks it).
"""

from __future__ import annotations

from trio_broker.config.keys import ConfigKey, _at_least, _bool, _int, _list, _one_of, _str

__all__ = ["ACL_CONFIGS", "AUTHORIZER_CONFIGS", "SECURITY_CONFIGS"]


# The values of Kafka's SecurityProtocol.
_SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def _protocol_map(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for entry in _list(text):
        name, sep, protocol = entry.partition(":")
        protocol = protocol.strip().upper()
        if not sep or protocol not in _SECURITY_PROTOCOLS:
            raise ValueError(f"expected NAME:PROTOCOL with one of {', '.join(_SECURITY_PROTOCOLS)}")
        out[name.strip().upper()] = protocol
    return out


# listeners' security protocols, TLS, SASL
SECURITY_CONFIGS: tuple[ConfigKey, ...] = (
    ConfigKey(
        "listener.security.protocol.map",
        "STRING",
        ",".join(f"{p}:{p}" for p in _SECURITY_PROTOCOLS),
        _str,
        _protocol_map,
        "Security protocol of each listener name: NAME:PROTOCOL,... "
        "(PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL).",
    ),
    ConfigKey(
        "inter.broker.listener.name",
        "STRING",
        None,
        _str,
        None,
        "The listener brokers use to reach each other; default the first listener.",
    ),
    ConfigKey(
        "security.inter.broker.protocol",
        "STRING",
        "PLAINTEXT",
        _str,
        _one_of(*_SECURITY_PROTOCOLS),
        "Security protocol between brokers when inter.broker.listener.name is not set.",
    ),
    ConfigKey("ssl.keystore.type", "STRING", "PEM", _str, _one_of("PEM"), "Only PEM is supported."),
    ConfigKey(
        "ssl.keystore.location",
        "STRING",
        None,
        _str,
        None,
        "PEM file with the listener's private key and its certificate chain.",
    ),
    ConfigKey(
        "ssl.keystore.password",
        "PASSWORD",
        None,
        _str,
        None,
        "Accepted for Kafka compatibility; a PEM key's password is ssl.key.password.",
        sensitive=True,
    ),
    ConfigKey(
        "ssl.key.password",
        "PASSWORD",
        None,
        _str,
        None,
        "Password of an encrypted private key.",
        sensitive=True,
    ),
    ConfigKey(
        "ssl.keystore.key",
        "PASSWORD",
        None,
        _str,
        None,
        "The private key in PEM, inline (instead of ssl.keystore.location).",
        sensitive=True,
    ),
    ConfigKey(
        "ssl.keystore.certificate.chain",
        "PASSWORD",
        None,
        _str,
        None,
        "The certificate chain in PEM, inline, with ssl.keystore.key.",
        sensitive=True,
    ),
    ConfigKey(
        "ssl.truststore.type", "STRING", "PEM", _str, _one_of("PEM"), "Only PEM is supported."
    ),
    ConfigKey(
        "ssl.truststore.location",
        "STRING",
        None,
        _str,
        None,
        "PEM file of the CA certificates client certificates are checked against.",
    ),
    ConfigKey(
        "ssl.truststore.password",
        "PASSWORD",
        None,
        _str,
        None,
        "Accepted for Kafka compatibility; PEM trust stores have none.",
        sensitive=True,
    ),
    ConfigKey(
        "ssl.truststore.certificates",
        "PASSWORD",
        None,
        _str,
        None,
        "CA certificates in PEM, inline (instead of ssl.truststore.location).",
        sensitive=True,
    ),
    ConfigKey(
        "ssl.client.auth",
        "STRING",
        "none",
        _str,
        _one_of("none", "requested", "required"),
        "Whether clients must (required) or may (requested) present a certificate.",
    ),
    ConfigKey(
        "ssl.enabled.protocols",
        "LIST",
        ("TLSv1.2", "TLSv1.3"),
        _list,
        None,
        "TLS versions accepted.",
    ),
    ConfigKey("ssl.protocol", "STRING", "TLSv1.3", _str, None, "Accepted for compatibility."),
    ConfigKey(
        "ssl.cipher.suites",
        "LIST",
        (),
        _list,
        None,
        "TLS 1.2 cipher suites allowed (IANA or OpenSSL names); empty for OpenSSL's defaults.",
    ),
    ConfigKey(
        "ssl.endpoint.identification.algorithm",
        "STRING",
        "https",
        _str,
        None,
        "Accepted for compatibility (used by clients).",
    ),
    ConfigKey(
        "ssl.principal.mapping.rules",
        "STRING",
        "DEFAULT",
        _str,
        None,
        "How a TLS client's certificate subject DN becomes its principal name: "
        "RULE:pattern/replacement/[LU],...,DEFAULT (the DN itself).",
    ),
    ConfigKey(
        "sasl.enabled.mechanisms",
        "LIST",
        ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
        _list,
        None,
        "SASL mechanisms offered on SASL listeners: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512.",
    ),
    ConfigKey(
        "sasl.mechanism.inter.broker.protocol",
        "STRING",
        "PLAIN",
        _str,
        None,
        "SASL mechanism brokers use with each other.",
    ),
    ConfigKey(
        "sasl.jaas.config",
        "PASSWORD",
        None,
        _str,
        None,
        'JAAS-style login: PlainLoginModule ... user_<name>="<password>" entries.',
        sensitive=True,
    ),
    ConfigKey(
        "connections.max.reauth.ms",
        "LONG",
        0,
        _int,
        _at_least(0),
        "A SASL session's lifetime: a client must re-authenticate within it (0: forever).",
    ),
)

# Who is allowed what. The client quota windows (quotas.CLIENT_QUOTA_CONFIGS) come between
# these and ACL_CONFIGS in BROKER_CONFIGS.
AUTHORIZER_CONFIGS: tuple[ConfigKey, ...] = (
    ConfigKey(
        "authorizer.class.name",
        "STRING",
        "",
        _str,
        None,
        "Enables ACLs: kafka.security.authorizer.AclAuthorizer or "
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer (empty: none).",
    ),
    ConfigKey(
        "super.users",
        "STRING",
        "",
        _str,
        None,
        "Principals allowed everything: User:alice;User:bob.",
    ),
)

ACL_CONFIGS: tuple[ConfigKey, ...] = (
    ConfigKey(
        "allow.everyone.if.no.acl.found",
        "BOOLEAN",
        False,
        _bool,
        None,
        "Whether a resource without ACLs is open to everyone.",
    ),
)
