"""The certificates and keys a private Kubernetes control plane needs, made on the spot.

One throw-away CA signs the API server's serving certificate and every client certificate
(the admin's, later a kubelet's); the service-account key pair signs the API server's tokens.
EC P-256 throughout: Kubernetes accepts it everywhere and it is made in microseconds, where RSA
keys would cost the fixture a second each.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALID = datetime.timedelta(days=2)


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its key, as PEM files."""

    cert: Path
    key: Path


def _name(common: str, organization: str | None = None) -> x509.Name:
    parts = [x509.NameAttribute(NameOID.COMMON_NAME, common)]
    if organization:
        parts.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(parts)


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


_CA_USAGE = x509.KeyUsage(
    digital_signature=True,
    key_cert_sign=True,
    crl_sign=True,
    content_commitment=False,
    key_encipherment=False,
    data_encipherment=False,
    key_agreement=False,
    encipher_only=False,
    decipher_only=False,
)


class CertificateAuthority:
    """A CA in `directory` (ca.crt, ca.key) that issues server and client certificates."""

    def __init__(self, directory: Path, name: str = "firepool-test-ca") -> None:
        self.directory = directory
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        self._name = _name(name)
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(self._name)
            .issuer_name(self._name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + _VALID)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(_CA_USAGE, critical=True)
            .sign(self._key, hashes.SHA256())
        )
        self.pair = KeyPair(directory / "ca.crt", directory / "ca.key")
        self.pair.cert.write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))
        _write_key(self._key, self.pair.key)

    def issue(
        self,
        stem: str,
        common: str,
        *,
        organization: str | None = None,
        hosts: tuple[str, ...] = (),
        server: bool = False,
    ) -> KeyPair:
        """A certificate for `common` (client auth, plus server auth for `hosts` if `server`)."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        usages = [ExtendedKeyUsageOID.CLIENT_AUTH]
        if server:
            usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common, organization))
            .issuer_name(self._name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + _VALID)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        )
        if hosts:
            names: list[x509.GeneralName] = []
            for host in hosts:
                try:
                    names.append(x509.IPAddress(ipaddress.ip_address(host)))
                except ValueError:
                    names.append(x509.DNSName(host))
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        pair = KeyPair(self.directory / f"{stem}.crt", self.directory / f"{stem}.key")
        pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(key, pair.key)
        return pair


def signing_key_pair(directory: Path, stem: str = "service-account") -> KeyPair:
    """A bare key pair (public key in `.pub`, named `cert` here) for service-account tokens."""
    key = ec.generate_private_key(ec.SECP256R1())
    public = directory / f"{stem}.pub"
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    private = directory / f"{stem}.key"
    _write_key(key, private)
    return KeyPair(public, private)
