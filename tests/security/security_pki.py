"""Certificates made in the test: a CA, the broker's key and chain, a client's."""

from __future__ import annotations

from pathlib import Path

import attrs
import trustme
from cryptography.hazmat.primitives import serialization


@attrs.frozen
class Pki:
    ca: Path  # the CA certificate (clients' and the broker's trust store)
    server: Path  # the broker's key and chain in one PEM file
    server_key: Path
    server_chain: Path
    client_cert: Path
    client_key: Path
    other_ca_client_cert: Path  # signed by a CA the broker does not trust
    other_ca_client_key: Path


def make_pki(directory: Path) -> Pki:
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert("alice@example.org", common_name="alice")
    stranger = trustme.CA().issue_cert("mallory@example.org", common_name="mallory")
    paths = {}
    for name, blob in {
        "ca": ca.cert_pem,
        "server": server.private_key_and_cert_chain_pem,
        "server_key": server.private_key_pem,
        "client_cert": client.cert_chain_pems[0],
        "client_key": client.private_key_pem,
        "other_ca_client_cert": stranger.cert_chain_pems[0],
        "other_ca_client_key": stranger.private_key_pem,
    }.items():
        paths[name] = directory / f"{name}.pem"
        blob.write_to_path(str(paths[name]))
    paths["server_chain"] = directory / "server_chain.pem"
    paths["server_chain"].write_bytes(b"".join(p.bytes() for p in server.cert_chain_pems))
    return Pki(**paths)


def encrypt_key(key_pem: bytes, password: str) -> bytes:
    key = serialization.load_pem_private_key(key_pem, password=None)
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(password.encode()),
    )
