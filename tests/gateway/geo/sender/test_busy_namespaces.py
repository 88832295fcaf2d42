"""A busy namespace is not a hung one: time a send spends queued behind the transport's
own per-entity lock (its earlier sends) does not count against its deadline, so many
concurrent sends to two healthy namespaces are never hedged, mark nothing down and
change no roles; a namespace that really hangs is still hedged past within the
deadline, queued sends included."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path

import anyio
import pytest

from gateway import SendResult
from gateway.aio import AsyncGeoSender
from gateway.transports import FaultyTransport, LocalTransport
from replication import DeadlinePolicy, Message, ReplicationPolicy
from tests.gateway.conftest import Namespaces, Recorder, SenderFactory

pytestmark = pytest.mark.anyio

#: The sender's deadlines: at most 0.4 s once a namespace's latencies are known.
QUICK = ReplicationPolicy(deadlines=DeadlinePolicy(floor=0.3, ceiling=0.4, initial=0.4))
#: Deadlines of 2-2.5 s: a loaded machine (10 test processes on 2 cores) stalled the
#: sender's loop for 0.3 s, and once for 0.8 s.
PATIENT = ReplicationPolicy(deadlines=DeadlinePolicy(floor=2.0, ceiling=2.5, initial=2.5))
CONCURRENT = 100
#: How long each send holds its transport's lock: 100 of them queue for 5 s, twice the
#: longest patient deadline.
TURN = 0.05


class Serialized(FaultyTransport):
    """A namespace that takes one send at a time, each ``TURN`` seconds, as the Service
    Bus transport's per-entity lock makes it; the faults (a hang) apply while a send
    holds the lock. What it took is kept in ``sent`` (in memory: no worker threads, so
    a loaded machine's thread scheduling does not come into it)."""

    def __init__(self, inner: LocalTransport) -> None:
        super().__init__(inner)
        self.lock = asyncio.Lock()
        self.sent: list[str] = []

    async def send(self, entity: str, messages: Sequence[Message]) -> None:
        async with self.lock:
            await self._before("send")
            await asyncio.sleep(TURN)
            self.sent += [m.message_id for m in messages]


async def send_all(sender: AsyncGeoSender, prefix: str, n: int) -> list[SendResult]:
    return await asyncio.gather(*(sender.send(Message("x", message_id=f"{prefix}{i}"))
                                  for i in range(n)))


def hedged_or_moved(results: Sequence[SendResult]) -> list[SendResult]:
    return [r for r in results if r.hedged or r.failed_over or r.namespaces != ("primary",)]


async def test_sends_queued_behind_a_busy_healthy_namespace_are_not_hedged(
    make_sender: SenderFactory, data_dir: Path, ns: Namespaces
) -> None:
    async with Serialized(LocalTransport("primary", data_dir=data_dir)) as primary, \
            Serialized(LocalTransport("secondary", data_dir=data_dir)) as secondary:
        # Given a passive sender whose namespaces are healthy, each taking TURN a send
        hooks = Recorder()
        sender = make_sender(primary=primary, secondary=secondary, policy=PATIENT,
                             hooks=hooks)
        await send_all(sender, "w", 3)
        # When 100 sends go at once (the last waits 100 x TURN behind the others)
        with anyio.fail_after(20):
            results = await send_all(sender, "m", CONCURRENT)
        # Then none was hedged, nothing was marked down, and the roles never changed
        assert hedged_or_moved(results) == []
        assert sender.down == frozenset() and hooks.events == []
        assert (sender.roles.active, sender.roles.generation) == ("primary", 0)
        assert len(primary.sent) == CONCURRENT + 3 and secondary.sent == []


async def test_sends_queued_behind_a_hung_send_are_hedged_within_the_deadline(
    make_sender: SenderFactory, data_dir: Path, ns: Namespaces
) -> None:
    async with Serialized(LocalTransport("primary", data_dir=data_dir)) as primary, \
            Serialized(LocalTransport("secondary", data_dir=data_dir)) as secondary:
        # Given a passive sender whose primary hangs while holding its send lock
        sender = make_sender(primary=primary, secondary=secondary, policy=QUICK)
        await send_all(sender, "w", 3)
        primary.hang()
        # When 10 sends go at once (9 queued behind the hung one)
        began = time.monotonic()
        with anyio.fail_after(5):
            results = await send_all(sender, "m", 10)
        took = time.monotonic() - began
        # Then each was hedged to the secondary within about one deadline
        assert all(r.namespaces == ("secondary",) and r.hedged for r in results)
        assert took < 0.4 + 0.6, took
        assert sender.roles.active == "secondary" and "primary" in sender.down
        assert sorted(secondary.sent) == sorted(f"m{i}" for i in range(10))
        primary.unhang()
