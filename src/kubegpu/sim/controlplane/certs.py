"""Certificates for the simulated cluster's control plane, made with ``cryptography``.

Everything uses ECDSA P-256 keys: they are generated in about a millisecond (RSA takes tens to
hundreds), and every Kubernetes component, etcd, Go's TLS stack and OpenSSL accept them,
including as the service-account token signing key (ES256).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = [
    "CertificateAuthority",
    "IssuedCert",
    "SigningKey",
    "generate_signing_key",
    "write_private",
    "write_public",
]

_CLOCK_SKEW = dt.timedelta(hours=1)


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _name(common_name: str, organizations: Sequence[str] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attrs)


def write_private(path: Path, data: bytes) -> None:
    """Write a private key (or anything secret) readable by the owner only."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(path, 0o600)


def write_public(path: Path, data: bytes) -> None:
    """Write a certificate or public key."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


@dataclass(frozen=True)
class IssuedCert:
    """A certificate and its private key, both PEM-encoded."""

    cert_pem: bytes
    key_pem: bytes

    def write(self, cert_path: Path, key_path: Path) -> None:
        """Write the certificate and key (the key with mode 0600)."""
        write_public(cert_path, self.cert_pem)
        write_private(key_path, self.key_pem)


@dataclass(frozen=True)
class SigningKey:
    """A bare key pair (the service-account token signing key), PEM-encoded."""

    private_pem: bytes
    public_pem: bytes


def generate_signing_key() -> SigningKey:
    """Make the key pair the API server signs service-account tokens with."""
    key = _new_key()
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return SigningKey(private_pem=_key_pem(key), public_pem=public)


class CertificateAuthority:
    """A self-signed CA that issues the cluster's serving and client certificates."""

    def __init__(self, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> None:
        self._cert = cert
        self._key = key

    @classmethod
    def create(cls, common_name: str = "kubegpu-ca", days: int = 3650) -> CertificateAuthority:
        """Make a new CA with a fresh key."""
        key = _new_key()
        now = dt.datetime.now(dt.UTC)
        name = _name(common_name)
        ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _CLOCK_SKEW)
            .not_valid_after(now + dt.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(ski, critical=False)
            .sign(key, hashes.SHA256())
        )
        return cls(cert, key)

    @property
    def cert_pem(self) -> bytes:
        """The CA certificate, PEM-encoded."""
        return self._cert.public_bytes(serialization.Encoding.PEM)

    @property
    def key_pem(self) -> bytes:
        """The CA private key, PEM-encoded (PKCS#8)."""
        return _key_pem(self._key)

    def write(self, cert_path: Path, key_path: Path) -> None:
        """Write the CA certificate and key (the key with mode 0600)."""
        write_public(cert_path, self.cert_pem)
        write_private(key_path, self.key_pem)

    def issue(
        self,
        common_name: str,
        *,
        organizations: Sequence[str] = (),
        dns_names: Sequence[str] = (),
        ip_addresses: Sequence[str] = (),
        server: bool = False,
        client: bool = False,
        days: int = 365,
    ) -> IssuedCert:
        """Issue a leaf certificate.

        For a client certificate Kubernetes reads the user name from ``common_name`` and the
        groups from ``organizations``. A serving certificate needs ``dns_names`` and/or
        ``ip_addresses`` (subject alternative names).
        """
        if not (server or client):
            raise ValueError("a certificate must be for server and/or client use")
        if server and not (dns_names or ip_addresses):
            raise ValueError(f"serving certificate {common_name!r} needs at least one SAN")
        key = _new_key()
        now = dt.datetime.now(dt.UTC)
        usages = []
        if server:
            usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
        if client:
            usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
        ca_ski = self._cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name, organizations))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _CLOCK_SKEW)
            .not_valid_after(now + dt.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski),
                critical=False,
            )
        )
        sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns_names]
        sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        return IssuedCert(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))
