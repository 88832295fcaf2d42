"""A namespace that refuses the gateway's credentials, or whose host name does not
resolve, is unusable (not the message): over the real Azure SDK transports against the
emulator (which checks keys), a passive sender fails over, an active one buffers that
namespace's copy, and one ERROR line says what to check, never the key."""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from prometheus_client import CollectorRegistry

from gateway.aio import AsyncGeoSender
from gateway.emulator import Emulator
from gateway.observability import PrometheusMetrics
from gateway.transports.base import Transport
from gateway.transports.servicebus import ServiceBusTransport
from replication import (
    Message,
    MessageTooLarge,
    Mode,
    NamespaceMisconfigured,
    ReplicationPolicy,
)

pytestmark = pytest.mark.anyio

QUEUE = "orders"
WRONG_KEY = "V3JvbmdLZXlXcm9uZ0tleVdyb25nS2V5V3Jvbmc="


@pytest.fixture
async def emulator(tmp_path: Path) -> AsyncIterator[Emulator]:
    async with Emulator({"primary": 0, "secondary": 0}, data_dir=tmp_path / "data",
                        queues=[QUEUE]) as emu:
        yield emu


def wrong_key(connection_string: str) -> str:
    return re.sub(r"SharedAccessKey=[^;]*", f"SharedAccessKey={WRONG_KEY}", connection_string)


def unresolvable(connection_string: str) -> str:
    return re.sub(r"Endpoint=sb://[^/;]*", "Endpoint=sb://contoso-east.invalid:5672",
                  connection_string)


def pair(emulator: Emulator, primary: str) -> list[Transport]:
    return [ServiceBusTransport.from_connection_string(primary, name="primary"),
            ServiceBusTransport.from_connection_string(
                emulator.connection_string("secondary"), name="secondary")]


def errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno >= logging.ERROR and r.name == "geogateway"]


@pytest.mark.parametrize(("spoil", "check"), [(wrong_key, "key"),
                                              (unresolvable, "host name")])
async def test_a_passive_sender_fails_over_from_a_namespace_it_cannot_use(
    emulator: Emulator, tmp_path: Path, caplog: pytest.LogCaptureFixture, spoil: object,
    check: str,
) -> None:
    assert callable(spoil)
    opened = pair(emulator, spoil(emulator.connection_string("primary")))
    caplog.set_level(logging.INFO, logger="geogateway")
    registry = CollectorRegistry()
    try:
        async with AsyncGeoSender(primary=opened[0], secondary=opened[1], entity=QUEUE,
                                  state_dir=tmp_path / "state",
                                  hooks=[PrometheusMetrics(registry=registry)]) as sender:
            # When a passive sender sends twice, the primary unusable
            with anyio.fail_after(10):
                first = await sender.send(Message("a", message_id="m1"))
                second = await sender.send(Message("b", message_id="m2"))
            # Then the secondary took both, and the first failed over
            assert first.namespaces == ("secondary",) and first.failed_over
            assert second.namespaces == ("secondary",)
            assert "primary" in sender.down
        # And one ERROR line names the namespace and what to check, not the key
        logged = errors(caplog)
        assert len(logged) == 1, logged
        assert "primary" in logged[0] and f"check the {check}" in logged[0]
        assert WRONG_KEY not in caplog.text
        # And the metrics flag it refused (not only down)
        flagged = registry.get_sample_value("geogateway_namespace_refused",
                                            {"namespace": "primary"})
        assert flagged == 1
    finally:
        for transport in opened:
            await transport.aclose()


async def test_an_active_sender_buffers_the_copy_of_a_namespace_refusing_its_key(
    emulator: Emulator, tmp_path: Path
) -> None:
    opened = pair(emulator, wrong_key(emulator.connection_string("primary")))
    try:
        async with AsyncGeoSender(
                primary=opened[0], secondary=opened[1], entity=QUEUE,
                policy=ReplicationPolicy(mode=Mode.ACTIVE), state_dir=tmp_path / "state",
                durable_queue=tmp_path / "q.db") as sender:
            # When an active sender sends
            with anyio.fail_after(10):
                result = await sender.send(Message("a", message_id="m1"))
            # Then the secondary took it and the primary's copy is buffered
            assert result.namespaces == ("secondary",)
            assert result.buffered == (f"primary/{QUEUE}",)
    finally:
        for transport in opened:
            await transport.aclose()


async def test_the_sdk_transport_says_a_wrong_key_makes_the_namespace_unusable(
    emulator: Emulator,
) -> None:
    primary = ServiceBusTransport.from_connection_string(
        wrong_key(emulator.connection_string("primary")), name="primary")
    try:
        # When a transport with a wrong key sends / Then the namespace is unusable
        with anyio.fail_after(10), pytest.raises(NamespaceMisconfigured) as caught:
            await primary.send(QUEUE, [Message("a")])
        assert caught.value.namespace == "primary" and WRONG_KEY not in str(caught.value)
    finally:
        await primary.aclose()


async def test_a_message_too_large_is_still_refused_for_good(
    emulator: Emulator, tmp_path: Path
) -> None:
    opened = pair(emulator, emulator.connection_string("primary"))
    try:
        async with AsyncGeoSender(primary=opened[0], secondary=opened[1], entity=QUEUE,
                                  state_dir=tmp_path / "state") as sender:
            # When a message over the limit is sent / Then it is refused, no failover
            with anyio.fail_after(10), pytest.raises(MessageTooLarge):
                await sender.send(Message(b"x" * 2_000_000, message_id="big"))
            assert not sender.down and sender.roles.active == "primary"
    finally:
        for transport in opened:
            await transport.aclose()
