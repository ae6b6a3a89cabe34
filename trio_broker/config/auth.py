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

from trio_broker.config.keys import (
    PER_BROKER,
    ConfigKey,
    _at_least,
    _bool,
    _int,
    _list,
    _one_of,
    _str,
    key,
)

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

# Kafka's other BrokerSecurityConfigs keys (TLS engines, Kerberos, SASL login and
# OAUTHBEARER), with DelegationTokenManagerConfigs and PasswordEncoderConfigs: accepted,
# stored, described, not acted on. Kafka changes the per-broker ones at runtime.
_SECURITY_STORED_ONLY: tuple[ConfigKey, ...] = (
    key("sasl.server.max.receive.size", "INT", 524288, None,
        "Largest SASL message accepted before authentication."),
    key("security.providers", "STRING", None, None,
        "SecurityProviderCreator classes registering JCA providers."),
    key("principal.builder.class", "CLASS",
        "org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder",
        None, "A KafkaPrincipalBuilder class that names a connection's principal.",
        dynamic=PER_BROKER),
    key("ssl.allow.dn.changes", "BOOLEAN", False, None,
        "Whether a reloaded key store may change its certificate's subject."),
    key("ssl.allow.san.changes", "BOOLEAN", False, None,
        "Whether a reloaded key store may change its certificate's alternative names."),
    key("ssl.provider", "STRING", None, None,
        "JCA security provider of the TLS engine.", dynamic=PER_BROKER),
    key("ssl.keymanager.algorithm", "STRING", "SunX509", None,
        "JCA key manager algorithm.", dynamic=PER_BROKER),
    key("ssl.trustmanager.algorithm", "STRING", "PKIX", None,
        "JCA trust manager algorithm.", dynamic=PER_BROKER),
    key("ssl.secure.random.implementation", "STRING", None, None,
        "JCA SecureRandom implementation of TLS.", dynamic=PER_BROKER),
    key("ssl.engine.factory.class", "CLASS", None, None,
        "A class that creates the TLS engines.", dynamic=PER_BROKER),
    key("sasl.server.callback.handler.class", "CLASS", None, None,
        "A SASL server callback handler class."),
    key("sasl.kerberos.principal.to.local.rules", "LIST", ("DEFAULT",), None,
        "Rules turning a Kerberos principal into a short name.", dynamic=PER_BROKER),
    key("sasl.client.callback.handler.class", "CLASS", None, None,
        "A SASL client callback handler class (inter-broker connections)."),
    key("sasl.login.class", "CLASS", None, None, "A SASL Login class."),
    key("sasl.login.callback.handler.class", "CLASS", None, None,
        "A SASL login callback handler class."),
    key("sasl.kerberos.service.name", "STRING", None, None,
        "Kerberos principal name Kafka runs as.", dynamic=PER_BROKER),
    key("sasl.kerberos.kinit.cmd", "STRING", "/usr/bin/kinit", None,
        "Path of the Kerberos kinit command.", dynamic=PER_BROKER),
    key("sasl.kerberos.ticket.renew.window.factor", "DOUBLE", 0.8, None,
        "Share of a Kerberos ticket's life after which it is renewed.", dynamic=PER_BROKER),
    key("sasl.kerberos.ticket.renew.jitter", "DOUBLE", 0.05, None,
        "Random share added to the Kerberos renewal time.", dynamic=PER_BROKER),
    key("sasl.kerberos.min.time.before.relogin", "LONG", 60000, None,
        "Shortest time between two Kerberos logins of the login thread.",
        dynamic=PER_BROKER),
    key("sasl.login.refresh.window.factor", "DOUBLE", 0.8, None,
        "Share of a login credential's life after which it is refreshed.",
        dynamic=PER_BROKER),
    key("sasl.login.refresh.window.jitter", "DOUBLE", 0.05, None,
        "Random share added to the credential refresh time.", dynamic=PER_BROKER),
    key("sasl.login.refresh.min.period.seconds", "SHORT", 60, None,
        "Shortest time between two credential refreshes.", dynamic=PER_BROKER),
    key("sasl.login.refresh.buffer.seconds", "SHORT", 300, None,
        "Time before a credential expires at which it is refreshed.", dynamic=PER_BROKER),
    key("sasl.login.connect.timeout.ms", "INT", None, None,
        "Connect timeout of an OAUTHBEARER login's HTTP requests."),
    key("sasl.login.read.timeout.ms", "INT", None, None,
        "Read timeout of an OAUTHBEARER login's HTTP requests."),
    key("sasl.login.retry.backoff.max.ms", "LONG", 10000, None,
        "Longest wait between OAUTHBEARER login retries."),
    key("sasl.login.retry.backoff.ms", "LONG", 100, None,
        "First wait between OAUTHBEARER login retries."),
    key("sasl.oauthbearer.scope.claim.name", "STRING", "scope", None,
        "JWT claim holding an OAUTHBEARER token's scopes."),
    key("sasl.oauthbearer.sub.claim.name", "STRING", "sub", None,
        "JWT claim holding an OAUTHBEARER token's subject."),
    key("sasl.oauthbearer.token.endpoint.url", "STRING", None, None,
        "Where an OAUTHBEARER login gets its token."),
    key("sasl.oauthbearer.jwks.endpoint.url", "STRING", None, None,
        "Where the keys that sign OAUTHBEARER tokens are published."),
    key("sasl.oauthbearer.jwks.endpoint.refresh.ms", "LONG", 3600000, None,
        "How often the signing keys are fetched again."),
    key("sasl.oauthbearer.jwks.endpoint.retry.backoff.ms", "LONG", 100, None,
        "First wait between attempts to fetch the signing keys."),
    key("sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms", "LONG", 10000, None,
        "Longest wait between attempts to fetch the signing keys."),
    key("sasl.oauthbearer.clock.skew.seconds", "INT", 30, None,
        "Clock difference allowed when a token's times are checked."),
    key("sasl.oauthbearer.expected.audience", "LIST", None, None,
        "Audiences an OAUTHBEARER token must name one of."),
    key("sasl.oauthbearer.expected.issuer", "STRING", None, None,
        "Issuer an OAUTHBEARER token must name."),
    key("delegation.token.master.key", "PASSWORD", None, None,
        "Deprecated name of delegation.token.secret.key."),
    key("delegation.token.secret.key", "PASSWORD", None, None,
        "Secret that signs delegation tokens; unset, delegation tokens are off."),
    key("delegation.token.max.lifetime.ms", "LONG", 7 * 24 * 3600000, _at_least(1),
        "Longest life of a delegation token, renewals included."),
    key("delegation.token.expiry.time.ms", "LONG", 24 * 3600000, _at_least(1),
        "Life of a delegation token between renewals."),
    key("delegation.token.expiry.check.interval.ms", "LONG", 3600000, _at_least(1),
        "How often expired delegation tokens are removed."),
    key("password.encoder.secret", "PASSWORD", None, None,
        "Secret that encrypts passwords stored as dynamic configs."),
    key("password.encoder.old.secret", "PASSWORD", None, None,
        "The previous password.encoder.secret, while passwords are re-encrypted."),
    key("password.encoder.keyfactory.algorithm", "STRING", None, None,
        "SecretKeyFactory algorithm of the password encoder."),
    key("password.encoder.cipher.algorithm", "STRING", "AES/CBC/PKCS5Padding", None,
        "Cipher of the password encoder."),
    key("password.encoder.key.length", "INT", 128, _at_least(8),
        "Key length of the password encoder."),
    key("password.encoder.iterations", "INT", 4096, _at_least(1024),
        "Key derivation iterations of the password encoder."),
)  # fmt: skip


SECURITY_CONFIGS: tuple[ConfigKey, ...] = (
    ConfigKey(
        "listener.security.protocol.map",
        "STRING",
        ",".join(f"{p}:{p}" for p in _SECURITY_PROTOCOLS),
        _str,
        _protocol_map,
        "Security protocol of each listener name: NAME:PROTOCOL,... "
        "(PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL).",
        dynamic=PER_BROKER,
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
    ConfigKey(
        "ssl.keystore.type",
        "STRING",
        "PEM",
        _str,
        _one_of("PEM"),
        "Only PEM is supported.",
        dynamic=PER_BROKER,
    ),
    ConfigKey(
        "ssl.keystore.location",
        "STRING",
        None,
        _str,
        None,
        "PEM file with the listener's private key and its certificate chain.",
        dynamic=PER_BROKER,
    ),
    ConfigKey(
        "ssl.keystore.password",
        "PASSWORD",
        None,
        _str,
        None,
        "Accepted for Kafka compatibility; a PEM key's password is ssl.key.password.",
        sensitive=True,
        dynamic=PER_BROKER,
        acts=False,
    ),
    ConfigKey(
        "ssl.key.password",
        "PASSWORD",
        None,
        _str,
        None,
        "Password of an encrypted private key.",
        sensitive=True,
        dynamic=PER_BROKER,
    ),
    ConfigKey(
        "ssl.keystore.key",
        "PASSWORD",
        None,
        _str,
        None,
        "The private key in PEM, inline (instead of ssl.keystore.location).",
        sensitive=True,
        dynamic=PER_BROKER,
    ),
    ConfigKey(
        "ssl.keystore.certificate.chain",
        "PASSWORD",
        None,
        _str,
        None,
        "The certificate chain in PEM, inline, with ssl.keystore.key.",
        sensitive=True,
        dynamic=PER_BROKER,
    ),
    ConfigKey(
        "ssl.truststore.type",
        "STRING",
        "PEM",
        _str,
        _one_of("PEM"),
        "Only PEM is supported.",
        dynamic=PER_BROKER,
    ),
    ConfigKey(
        "ssl.truststore.location",
        "STRING",
        None,
        _str,
        None,
        "PEM file of the CA certificates client certificates are checked against.",
        dynamic=PER_BROKER,
    ),
    ConfigKey(
        "ssl.truststore.password",
        "PASSWORD",
        None,
        _str,
        None,
        "Accepted for Kafka compatibility; PEM trust stores have none.",
        sensitive=True,
        dynamic=PER_BROKER,
        acts=False,
    ),
    ConfigKey(
        "ssl.truststore.certificates",
        "PASSWORD",
        None,
        _str,
        None,
        "CA certificates in PEM, inline (instead of ssl.truststore.location).",
        sensitive=True,
        dynamic=PER_BROKER,
    ),
    ConfigKey(
        "ssl.client.auth",
        "STRING",
        "none",
        _str,
        _one_of("none", "requested", "required"),
        "Whether clients must (required) or may (requested) present a certificate.",
        dynamic=PER_BROKER,
    ),
    ConfigKey(
        "ssl.enabled.protocols",
        "LIST",
        ("TLSv1.2", "TLSv1.3"),
        _list,
        None,
        "TLS versions accepted.",
        dynamic=PER_BROKER,
    ),
    ConfigKey(
        "ssl.protocol",
        "STRING",
        "TLSv1.3",
        _str,
        None,
        "Accepted for compatibility.",
        dynamic=PER_BROKER,
        acts=False,
    ),
    ConfigKey(
        "ssl.cipher.suites",
        "LIST",
        (),
        _list,
        None,
        "TLS 1.2 cipher suites allowed (IANA or OpenSSL names); empty for OpenSSL's defaults.",
        dynamic=PER_BROKER,
    ),
    ConfigKey(
        "ssl.endpoint.identification.algorithm",
        "STRING",
        "https",
        _str,
        None,
        "Accepted for compatibility (used by clients).",
        dynamic=PER_BROKER,
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
        dynamic=PER_BROKER,
    ),
    ConfigKey(
        "sasl.mechanism.inter.broker.protocol",
        "STRING",
        "PLAIN",
        _str,
        None,
        "SASL mechanism brokers use with each other.",
        dynamic=PER_BROKER,
    ),
    ConfigKey(
        "sasl.jaas.config",
        "PASSWORD",
        None,
        _str,
        None,
        'JAAS-style login: PlainLoginModule ... user_<name>="<password>" entries.',
        sensitive=True,
        dynamic=PER_BROKER,
    ),
    ConfigKey(
        "connections.max.reauth.ms",
        "LONG",
        0,
        _int,
        _at_least(0),
        "A SASL session's lifetime: a client must re-authenticate within it (0: forever).",
    ),
    *_SECURITY_STORED_ONLY,
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
