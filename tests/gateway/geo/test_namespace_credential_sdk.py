"""NamespaceConfig(credential=...) through the unmodified SDKs, against the emulator.

The emulator checks the shared access signature each SDK puts on ``$cbs``
(``gateway.amqp.server``): a key credential signs with its key, a SAS credential
hands its token over, a token credential hands over whatever token it issues.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote_plus, urlencode

import anyio.to_thread
import pytest
from azure.core.credentials import AccessToken, AzureNamedKeyCredential, AzureSasCredential
from azure.eventhub.aio import EventHubProducerClient

from gateway import (
    GeoReceiver,
    GeoSender,
    Message,
    NamespaceConfig,
    NamespaceUnavailable,
    ReplicationPolicy,
)
from gateway.emulator import DEFAULT_KEY, DEFAULT_KEY_NAME, Emulator, EventHubSpec
from replication import DeadlinePolicy

pytestmark = pytest.mark.anyio

QUEUE = "orders"
HUB = "telemetry"
NAMESPACES = ("primary", "secondary")
WRONG_KEY = "NotTheKey0123456789="
# A loaded machine may take more than the default first-answer deadline to connect.
PATIENT = ReplicationPolicy(deadlines=DeadlinePolicy(initial=30.0, ceiling=30.0))


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "namespaces"


@pytest.fixture
async def emulator(data_dir: Path) -> AsyncIterator[Emulator]:
    async with Emulator(dict.fromkeys(NAMESPACES, 0), data_dir=data_dir, queues=[QUEUE],
                        event_hubs=[EventHubSpec(name=HUB, partitions=2)]) as emu:
        yield emu


def sas_token(resource: str, *, key: str = DEFAULT_KEY, ttl: int = 600) -> str:
    """A shared access signature, made as Azure documents it."""
    expiry = str(int(time.time()) + ttl)
    digest = hmac.new(key.encode(), f"{quote_plus(resource)}\n{expiry}".encode(),
                      hashlib.sha256).digest()
    return "SharedAccessSignature " + urlencode({
        "sr": resource, "sig": base64.b64encode(digest), "se": expiry, "skn": DEFAULT_KEY_NAME})


class SasTokenCredential:
    """An async azure-core token credential whose tokens are shared access signatures."""

    def __init__(self, resource: str) -> None:
        self.resource = resource
        self.issued = 0

    async def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        self.issued += 1
        return AccessToken(sas_token(self.resource), int(time.time()) + 600)

    async def close(self) -> None:
        return None


def host(emulator: Emulator, name: str) -> str:
    return f"sb://127.0.0.1:{emulator.port(name)}"


def config(emulator: Emulator, name: str, credential: Any, kind: str = "servicebus"
           ) -> NamespaceConfig:
    return NamespaceConfig(url=host(emulator, name), name=name, kind=kind,
                           credential=credential, use_development_emulator=True)


def roundtrip(emulator: Emulator, tmp_path: Path, credential: Callable[[str], Any]
              ) -> list[str]:
    """Send two messages through a GeoSender and read them back through a GeoReceiver,
    both signed in with ``credential(namespace)``; the ids received."""
    primary, secondary = (config(emulator, n, credential(n)) for n in NAMESPACES)
    with GeoSender(primary=primary, secondary=secondary, entity=QUEUE, policy=PATIENT,
                   recovery=False, state_dir=tmp_path / "state") as sender:
        sent = sender.send_batch([Message("a", message_id="m1"), Message("b", message_id="m2")])
        assert sent.namespaces == ("primary",)
    with GeoReceiver(primary=primary, secondary=secondary, entity=QUEUE,
                     dedup_store=tmp_path / "dedup.db") as receiver:
        got = receiver.receive(max_messages=2, max_wait=10.0)
        for message in got:
            receiver.complete(message)
    return sorted(m.message_id for m in got)


async def test_a_named_key_credential_sends_and_receives(emulator: Emulator,
                                                         tmp_path: Path) -> None:
    # Given namespaces given by host, signed in to with the emulator's key name and key
    def named_key(_: str) -> AzureNamedKeyCredential:
        return AzureNamedKeyCredential(DEFAULT_KEY_NAME, DEFAULT_KEY)

    # When a GeoSender sends and a GeoReceiver receives with them, Then both work
    ids = await anyio.to_thread.run_sync(roundtrip, emulator, tmp_path, named_key)
    assert ids == ["m1", "m2"]


async def test_a_sas_credential_sends_and_receives(emulator: Emulator, tmp_path: Path) -> None:
    # Given a shared access signature for each namespace, made here
    def sas(name: str) -> AzureSasCredential:
        return AzureSasCredential(sas_token(host(emulator, name)))

    # When the gateway signs in with them, Then it sends and receives
    ids = await anyio.to_thread.run_sync(roundtrip, emulator, tmp_path, sas)
    assert ids == ["m1", "m2"]


async def test_an_async_token_credential_sends_and_receives(emulator: Emulator,
                                                            tmp_path: Path) -> None:
    # Given an async token credential for each namespace
    made: list[SasTokenCredential] = []

    def token(name: str) -> SasTokenCredential:
        made.append(SasTokenCredential(host(emulator, name)))
        return made[-1]

    # When the gateway signs in with them, Then it sends and receives with their tokens
    ids = await anyio.to_thread.run_sync(roundtrip, emulator, tmp_path, token)
    assert ids == ["m1", "m2"]
    assert made[0].issued > 0


async def test_a_wrong_key_makes_the_namespaces_unusable_without_showing_it(
        emulator: Emulator, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # Given namespaces signed in to with the right key name but a wrong key
    caplog.set_level(logging.DEBUG)

    def send() -> None:
        wrong = [config(emulator, n, AzureNamedKeyCredential(DEFAULT_KEY_NAME, WRONG_KEY))
                 for n in NAMESPACES]
        with GeoSender(primary=wrong[0], secondary=wrong[1], entity=QUEUE, policy=PATIENT,
                       recovery=False, state_dir=tmp_path / "state") as sender:
            sender.send(Message("a"))

    # When the gateway sends, Then both namespaces are unusable (as in an outage),
    # and the error says what to check
    with pytest.raises(NamespaceUnavailable, match="check the key") as info:
        await anyio.to_thread.run_sync(send)
    # And neither the error nor a log line shows the key
    assert WRONG_KEY not in str(info.value) and WRONG_KEY not in caplog.text
    assert WRONG_KEY not in repr(info.value)


async def test_an_event_hubs_namespace_takes_a_credential(emulator: Emulator,
                                                          tmp_path: Path) -> None:
    # Given Event Hubs namespaces signed in to with the emulator's key
    key = AzureNamedKeyCredential(DEFAULT_KEY_NAME, DEFAULT_KEY)
    primary, secondary = (config(emulator, n, key, kind="eventhubs") for n in NAMESPACES)

    def send() -> tuple[str, ...]:
        with GeoSender(primary=primary, secondary=secondary, entity=HUB, policy=PATIENT,
                       recovery=False, state_dir=tmp_path / "state") as sender:
            return sender.send(Message("e", message_id="e1")).namespaces

    # When a GeoSender sends an event, Then the primary's event hub has it
    assert await anyio.to_thread.run_sync(send) == ("primary",)
    async with EventHubProducerClient.from_connection_string(
            emulator.connection_string("primary"), eventhub_name=HUB) as client:
        ends = [await client.get_partition_properties(p) for p in ("0", "1")]
    assert sorted(e["last_enqueued_sequence_number"] for e in ends) == [-1, 0]
