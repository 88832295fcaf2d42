"""The emulator's TLS certificate, for the administration API over HTTPS.

azure-servicebus's ``ServiceBusAdministrationClient`` always speaks HTTPS (its base URL
is ``https://{endpoint}``, ``UseDevelopmentEmulator=true`` or not), so the emulator
answers it with a self-signed certificate made on first use and kept in the data
directory (``emulator-tls/``), so that a client that trusts it keeps trusting it across
restarts: ``ServiceBusAdministrationClient.from_connection_string(conn_str,
connection_verify=emulator.certificate)``. It names ``localhost``, ``127.0.0.1``, ``::1``
and the address the emulator listens on. The key never leaves that directory (mode 0600).
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import os
from collections.abc import Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover (Windows: one emulator per data directory at a time)
    fcntl = None  # type: ignore[assignment]

__all__ = ["certificate_files"]

_DIR = "emulator-tls"


def _names(host: str) -> list[object]:
    from cryptography import x509

    names: list[object] = [x509.DNSName("localhost"),
                           x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                           x509.IPAddress(ipaddress.ip_address("::1"))]
    host = host.strip("[]")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        if host and host != "localhost":
            names.append(x509.DNSName(host))
    else:
        if not address.is_unspecified and str(address) not in ("127.0.0.1", "::1"):
            names.append(x509.IPAddress(address))
    return names


def certificate_files(data_dir: str | os.PathLike[str], host: str) -> tuple[Path, Path]:
    """(certificate, key) PEM files for ``host``, made if missing or not naming ``host``.

    Several emulators may start on one data directory at once: the files are made
    under a lock, each written whole then renamed into place.

    Raises:
        OSError: the data directory cannot be written.
    """
    directory = Path(data_dir) / _DIR
    cert, key = directory / "certificate.pem", directory / "key.pem"
    wanted = _names(host)
    if cert.exists() and key.exists() and _covers(cert, wanted):
        return cert, key
    directory.mkdir(parents=True, exist_ok=True)
    with _locked(directory / ".lock"):
        if not (cert.exists() and key.exists() and _covers(cert, wanted)):
            key_pem, cert_pem = _make(wanted)
            _write(key, key_pem, 0o600)
            _write(cert, cert_pem, 0o644)
    return cert, key


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a+b") as fp:
        if fcntl is not None:
            fcntl.flock(fp, fcntl.LOCK_EX)
        yield


def _write(path: Path, data: bytes, mode: int) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as fp:
        fp.write(data)
    os.replace(temporary, path)


def _make(wanted: list[object]) -> tuple[bytes, bytes]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    private = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "geogateway emulator")])
    now = datetime.datetime.now(datetime.timezone.utc)
    public = private.public_key()
    built = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=3650))
        .add_extension(x509.SubjectAlternativeName(wanted), critical=False)  # type: ignore[arg-type]
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True,
                                     content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False,
                                     crl_sign=False, encipher_only=False,
                                     decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
                       critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(public),
                       critical=False)
        .sign(private, hashes.SHA256())
    )
    key_pem = private.private_bytes(serialization.Encoding.PEM,
                                    serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
    return key_pem, built.public_bytes(serialization.Encoding.PEM)


def _covers(cert: Path, wanted: list[object]) -> bool:
    from cryptography import x509

    try:
        loaded = x509.load_pem_x509_certificate(cert.read_bytes())
        names = loaded.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (ValueError, x509.ExtensionNotFound):
        return False
    expires = loaded.not_valid_after_utc
    soon = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=30)
    return expires > soon and all(n in names for n in wanted)
