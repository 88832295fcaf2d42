"""``tls_cert``/``tls_key``: the proxy serves AMQP over TLS, and the unmodified
azure-servicebus SDK connects with ``Endpoint=sb://localhost:PORT`` and its TLS
verification pointed at the proxy's (self-signed) certificate."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusMessage, TransportType
from azure.servicebus.aio import ServiceBusClient

from gateway.geo import GatewayConfig
from gateway.proxy import Proxy
from replication import ConfigError
from tests.gateway.proxy.conftest import QUEUE

pytestmark = pytest.mark.anyio


def self_signed(tmp_path: Path) -> tuple[Path, Path]:
    """A certificate for ``localhost`` and its key, as PEM files."""
    x509 = pytest.importorskip("cryptography.x509")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = tmp_path / "proxy.crt", tmp_path / "proxy.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


async def test_the_sdk_sends_and_receives_over_tls(config: GatewayConfig, tmp_path: Path) -> None:
    # Given a proxy serving TLS with a self-signed certificate for localhost
    cert, key = self_signed(tmp_path)
    async with Proxy(config, recovery=False, tls_cert=cert, tls_key=key) as proxy:
        conn = proxy.connection_string()
        assert proxy.tls and "UseDevelopmentEmulator" not in conn
        conn = conn.replace("127.0.0.1", "localhost")
        # When the SDK connects with its verification pointed at that certificate (it
        # drops an amqps Endpoint's port: custom_endpoint_address gives it back)
        async with ServiceBusClient.from_connection_string(
                conn, connection_verify=str(cert), retry_total=0,
                custom_endpoint_address=f"sb://localhost:{proxy.port}",
                transport_type=TransportType.Amqp) as client:
            async with client.get_queue_sender(QUEUE) as sender:
                await sender.send_messages(ServiceBusMessage("over tls", message_id="t1"))
            async with client.get_queue_receiver(QUEUE, max_wait_time=2) as receiver:
                got = await receiver.receive_messages(max_message_count=1, max_wait_time=2)
                # Then the message went through, over TLS
                assert [str(m.message_id) for m in got] == ["t1"]
                await receiver.complete_message(got[0])


def test_a_non_loopback_address_is_allowed_with_tls(config: GatewayConfig,
                                                    tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    assert Proxy(config, host="0.0.0.0", tls_cert=cert, tls_key=key).tls
    with pytest.raises(ConfigError, match="--insecure"):
        Proxy(config, host="0.0.0.0")


@pytest.mark.parametrize("which", ["cert", "key"])
def test_a_missing_certificate_or_key_is_one_line(config: GatewayConfig, tmp_path: Path,
                                                  which: str) -> None:
    cert, key = self_signed(tmp_path)
    (cert if which == "cert" else key).unlink()
    with pytest.raises(ConfigError, match="cannot read the TLS") as info:
        Proxy(config, tls_cert=cert, tls_key=key)
    assert "\n" not in str(info.value)


def test_a_key_alone_is_refused(config: GatewayConfig, tmp_path: Path) -> None:
    _, key = self_signed(tmp_path)
    with pytest.raises(ConfigError, match="both"):
        Proxy(config, tls_key=key)
