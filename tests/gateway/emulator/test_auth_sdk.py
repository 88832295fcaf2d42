"""Shared access signatures from the unmodified SDKs: namespace tokens, the well-known key."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from pathlib import Path
from urllib.parse import quote_plus, urlencode

import pytest
from azure.eventhub import EventData
from azure.eventhub.aio import EventHubProducerClient
from azure.eventhub.exceptions import AuthenticationError
from azure.servicebus import ServiceBusMessage
from azure.servicebus.aio import ServiceBusClient
from azure.servicebus.exceptions import ServiceBusAuthenticationError

from gateway.emulator import DEFAULT_KEY, DEFAULT_KEY_NAME, Emulator
from tests.gateway.emulator.conftest import HUB, QUEUE

pytestmark = pytest.mark.anyio

#: The connection string of the official Service Bus and Event Hubs emulators'
#: documentation, with the emulator's port made explicit.
OFFICIAL = ("Endpoint=sb://localhost:{port};SharedAccessKeyName=RootManageSharedAccessKey;"
            "SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true")


def sas(resource: str, *, key: str = DEFAULT_KEY, ttl: int = 600) -> str:
    """A token signed as Azure documents it (the SDKs' own generator does the same)."""
    expiry = str(int(time.time()) + ttl)
    digest = hmac.new(key.encode(), f"{quote_plus(resource)}\n{expiry}".encode(),
                      hashlib.sha256).digest()
    return "SharedAccessSignature " + urlencode({
        "sr": resource, "sig": base64.b64encode(digest), "se": expiry, "skn": DEFAULT_KEY_NAME})


def with_token(port: int, token: str) -> str:
    return (f"Endpoint=sb://127.0.0.1:{port};SharedAccessSignature={token};"
            "UseDevelopmentEmulator=true")


async def expect_hub_roundtrip(conn_str: str) -> None:
    async with EventHubProducerClient.from_connection_string(
            conn_str, eventhub_name=HUB, retry_total=0) as producer:
        batch = await producer.create_batch(partition_id="1")
        batch.add(EventData("e"))
        await producer.send_batch(batch)
        props = await producer.get_partition_properties("1")
    assert props["last_enqueued_sequence_number"] >= 0


async def expect_queue_roundtrip(conn_str: str) -> None:
    async with ServiceBusClient.from_connection_string(
            conn_str, retry_total=0, socket_timeout=0.05) as client:
        async with client.get_queue_sender(QUEUE, keep_alive=None) as sender:
            await sender.send_messages(ServiceBusMessage("q"))
        async with client.get_queue_receiver(QUEUE, max_wait_time=1) as receiver:
            [m] = await receiver.receive_messages(max_wait_time=2)
            await receiver.complete_message(m)
    assert str(m) == "q"


@pytest.mark.parametrize("resource", [
    "sb://127.0.0.1:{port}/", "sb://127.0.0.1:{port}", "https://127.0.0.1:{port}/",
    "http://localhost:{port}",
])
async def test_a_namespace_token_is_accepted_for_every_entity(emulator: Emulator,
                                                              resource: str) -> None:
    # Given a token whose audience is the namespace, not an entity
    port = emulator.port("primary")
    conn_str = with_token(port, sas(resource.format(port=port)))
    # When both SDKs use it for a queue and an event hub / Then both work
    await expect_queue_roundtrip(conn_str)
    await expect_hub_roundtrip(conn_str)


async def test_an_entity_token_grants_only_its_entity(emulator: Emulator) -> None:
    port = emulator.port("primary")
    conn_str = with_token(port, sas(f"sb://127.0.0.1:{port}/{QUEUE}"))
    await expect_queue_roundtrip(conn_str)
    with pytest.raises(AuthenticationError):
        await expect_hub_roundtrip(conn_str)


@pytest.mark.parametrize("token", [
    lambda port: sas(f"sb://127.0.0.1:{port}/", ttl=-60),
    lambda port: sas(f"sb://127.0.0.1:{port}/", key="bm90IHRoZSBrZXk="),
])
async def test_an_expired_or_wrongly_signed_namespace_token_is_refused(
        emulator: Emulator, token: object) -> None:
    port = emulator.port("primary")
    conn_str = with_token(port, token(port))  # type: ignore[operator]
    with pytest.raises(AuthenticationError):
        await expect_hub_roundtrip(conn_str)
    with pytest.raises(ServiceBusAuthenticationError):
        await expect_queue_roundtrip(conn_str)


async def test_the_official_emulators_connection_string_works_by_default(
        emulator: Emulator) -> None:
    # Given an emulator with its default settings, and code written for the official
    # emulators (their well-known key, localhost)
    conn_str = OFFICIAL.format(port=emulator.port("primary"))
    # When both SDKs use that exact string / Then they send and receive
    await expect_queue_roundtrip(conn_str)
    await expect_hub_roundtrip(conn_str)
    # and it is the string the emulator prints (but for the host)
    assert emulator.connection_string("primary").replace("127.0.0.1", "localhost") == conn_str


async def test_a_configured_key_replaces_the_well_known_one(tmp_path: Path) -> None:
    custom = "Y3VzdG9tIGtleQ=="
    async with Emulator({"primary": 0}, data_dir=tmp_path, queues=[QUEUE],
                        event_hubs={HUB: 2}, key=custom) as emu:
        port = emu.port("primary")
        # The configured key works, in the string the emulator prints
        await expect_hub_roundtrip(emu.connection_string("primary"))
        await expect_queue_roundtrip(emu.connection_string("primary"))
        # and the well-known one no longer does
        with pytest.raises(AuthenticationError):
            await expect_hub_roundtrip(OFFICIAL.format(port=port))
        with pytest.raises(ServiceBusAuthenticationError):
            await expect_queue_roundtrip(OFFICIAL.format(port=port))
