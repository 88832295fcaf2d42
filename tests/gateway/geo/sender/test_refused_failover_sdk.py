"""Failover from a refusing namespace over the real Azure SDK transports, against the
emulator: `namespace down` closes the emulated namespace's listener, so the SDK's next
connection is refused; that refusal is final for the send (``NamespaceRefused``), and
the sender goes on to the secondary without retrying the primary."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from gateway.aio import AsyncGeoSender
from gateway.emulator import Emulator, EventHubSpec
from gateway.transports import LocalNamespace
from gateway.transports.base import Transport
from gateway.transports.eventhubs import EventHubsTransport
from gateway.transports.servicebus import ServiceBusTransport
from replication import Message, NamespaceRefused, NamespaceUnavailable
from tests.gateway.geo.sender.test_refused_failover import Logged, before_backup

pytestmark = pytest.mark.anyio

QUEUE, HUB = "orders", "telemetry"
#: Longer than the emulator's poll of the control files (0.1 s).
APPLIED = 0.35


@pytest.fixture
async def emulator(tmp_path: Path) -> AsyncIterator[Emulator]:
    async with Emulator({"primary": 0, "secondary": 0}, data_dir=tmp_path / "data",
                        queues=[QUEUE], event_hubs=[EventHubSpec(name=HUB, partitions=2)]
                        ) as emu:
        yield emu


def open_pair(emulator: Emulator, kind: str) -> tuple[str, list[Transport]]:
    cls: type[ServiceBusTransport] | type[EventHubsTransport] = (
        ServiceBusTransport if kind == "servicebus" else EventHubsTransport)
    return (QUEUE if kind == "servicebus" else HUB), [
        cls.from_connection_string(emulator.connection_string(name), name=name)
        for name in ("primary", "secondary")]


@pytest.mark.parametrize("kind", ["servicebus", "eventhubs"])
async def test_the_sdk_transport_says_a_namespace_taken_down_refuses(
    emulator: Emulator, tmp_path: Path, kind: str
) -> None:
    entity, (primary, secondary) = open_pair(emulator, kind)
    try:
        # Given a transport that sent, and then its namespace taken down
        await primary.send(entity, [Message("warm")])
        LocalNamespace("primary", data_dir=tmp_path / "data").down()
        await anyio.sleep(APPLIED)
        # When it sends until its connection is refused (the first send may instead
        # find its old connection closed: a dropped connection, retried by a sender)
        errors: list[NamespaceUnavailable] = []
        for _ in range(2):
            with pytest.raises(NamespaceUnavailable) as caught:
                await primary.send(entity, [Message("a")])
            errors.append(caught.value)
        # Then the refusal is a NamespaceRefused
        assert isinstance(errors[-1], NamespaceRefused), errors
    finally:
        await primary.aclose()
        await secondary.aclose()


@pytest.mark.parametrize("kind", ["servicebus", "eventhubs"])
async def test_a_sender_started_while_the_primary_is_down_fails_over_after_one_attempt(
    emulator: Emulator, tmp_path: Path, kind: str
) -> None:
    entity, opened = open_pair(emulator, kind)
    log: list[str] = []
    primary, secondary = Logged(opened[0], log), Logged(opened[1], log)
    # Given the primary namespace taken down
    LocalNamespace("primary", data_dir=tmp_path / "data").down()
    await anyio.sleep(APPLIED)
    try:
        async with AsyncGeoSender(primary=primary, secondary=secondary, entity=entity,
                                  state_dir=tmp_path / "state") as sender:
            # When a passive sender sends
            with anyio.fail_after(10):
                result = await sender.send(Message("a", message_id="m1"))
            # Then the secondary took it after one attempt on the primary
            assert result.namespaces == ("secondary",) and result.failed_over
            assert before_backup(log) == 1
            assert log == ["primary", "secondary"]
    finally:
        for transport in opened:
            await transport.aclose()


@pytest.mark.parametrize("kind", ["servicebus", "eventhubs"])
async def test_a_primary_taken_down_mid_run_is_not_retried_once_it_refused(
    emulator: Emulator, tmp_path: Path, kind: str
) -> None:
    entity, opened = open_pair(emulator, kind)
    log: list[str] = []
    primary, secondary = Logged(opened[0], log), Logged(opened[1], log)
    try:
        async with AsyncGeoSender(primary=primary, secondary=secondary, entity=entity,
                                  state_dir=tmp_path / "state") as sender:
            # Given a passive sender sending to the primary, which is then taken down
            await sender.send(Message("warm", message_id="w"))
            LocalNamespace("primary", data_dir=tmp_path / "data").down()
            await anyio.sleep(APPLIED)
            log.clear()
            # When it sends
            with anyio.fail_after(10):
                result = await sender.send(Message("a", message_id="m1"))
            # Then the secondary took it: at most the dropped connection's immediate
            # retry before it, never the retry policy's third attempt
            assert result.namespaces == ("secondary",) and result.failed_over
            assert before_backup(log) <= 2
            assert log[-1] == "secondary" and log.count("secondary") == 1
    finally:
        for transport in opened:
            await transport.aclose()
