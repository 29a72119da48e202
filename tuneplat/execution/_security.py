"""TLS for Dask: ``RunConfig.security`` as a ``distributed.security.Security``, and the embedded cluster's
temporary certificates (``TUNEPLAT_LOCAL_TLS``)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from .._settings import env_str

__all__ = ["local_tls", "make_security", "temporary_security"]

logger = logging.getLogger("tuneplat")


def make_security(security: Any, where: str = "RunConfig.security") -> Any:
    """A ``distributed.security.Security`` from one, from a dict of its arguments, or None."""
    if security is None:
        return None
    from distributed.security import Security

    if isinstance(security, Security):
        return security
    if isinstance(security, Mapping):
        try:
            return Security(**dict(security))
        except (TypeError, ValueError, OSError) as exc:
            raise ValueError(f"{where}={_redact_tls(security)!r} is not valid for distributed.security.Security: "
                             f"{exc}. Give e.g. {{'tls_ca_file': 'ca.pem', 'tls_client_cert': 'cert.pem', "
                             "'tls_client_key': 'key.pem', 'require_encryption': True}") from None
    raise ValueError(f"{where} must be a distributed.security.Security or a dict of its arguments, "
                     f"got {type(security).__name__}")


def _redact_tls(security: Mapping[str, Any]) -> dict[str, Any]:
    return {k: ("<PEM>" if isinstance(v, str) and "\n" in v else v) for k, v in security.items()}


def temporary_security() -> Any:
    """TLS settings for the embedded cluster: a self-signed ECDSA P-256 certificate made now, held in memory only.

    Like ``Security.temporary()`` (one certificate for every role, its own CA),
    but with an elliptic-curve key: a TLS handshake then costs a fraction of an
    RSA-2048 one, and every trial's connection to the tuner starts with one.
    """
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    from distributed.security import Security

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tuneplat-embedded-cluster")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("tuneplat-embedded-cluster")]), critical=False)
            .sign(key, hashes.SHA256()))
    cert_pem = cert.public_bytes(serialization.Encoding.PEM).decode()
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
    return Security(require_encryption=True, tls_ca_file=cert_pem,
                    tls_client_cert=cert_pem, tls_client_key=key_pem,
                    tls_scheduler_cert=cert_pem, tls_scheduler_key=key_pem,
                    tls_worker_cert=cert_pem, tls_worker_key=key_pem)


def local_tls() -> bool:
    """The embedded cluster uses TLS (temporary certificates) unless ``TUNEPLAT_LOCAL_TLS=0``."""
    raw = (env_str("TUNEPLAT_LOCAL_TLS") or "1").lower()
    if raw in ("0", "false", "no", "off"):
        return False
    if raw in ("", "1", "true", "yes", "on"):
        return True
    raise ValueError(f"TUNEPLAT_LOCAL_TLS={raw!r}: set it to 1 (TLS, the default) or 0 (plain TCP)")

