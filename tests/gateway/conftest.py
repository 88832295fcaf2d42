"""Fixtures for the sender, receiver and sync driver tests: real local namespaces on
tmp_path files, FaultyTransport wrappers, hook recorders and small polling helpers."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from gateway.aio import AsyncGeoReceiver, AsyncGeoSender
from gateway.geo._hooks import GatewayHooks
from gateway.transports import FaultyTransport, LocalNamespace, LocalTransport
from replication import Message
from tests.gateway.cli.cli_support import dirs, run  # noqa: F401  (the CLI tests' fixtures)
from tests.gateway.stores.outbox_support import outbox_app  # noqa: F401  (the outbox tests')

ENTITY = "orders"


class Recorder(GatewayHooks):
    """Records every hook call as (name, kwargs)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def named(self, name: str) -> list[dict[str, Any]]:
        return [kw for n, kw in self.events if n == name]

    def on_failover(self, **kw: Any) -> None:
        self.events.append(("on_failover", kw))

    def on_namespace_down(self, **kw: Any) -> None:
        self.events.append(("on_namespace_down", kw))

    def on_namespace_up(self, **kw: Any) -> None:
        self.events.append(("on_namespace_up", kw))

    def on_buffered(self, **kw: Any) -> None:
        self.events.append(("on_buffered", kw))

    def on_replayed(self, **kw: Any) -> None:
        self.events.append(("on_replayed", kw))

    def on_duplicate(self, **kw: Any) -> None:
        self.events.append(("on_duplicate", kw))

    def on_store_down(self, **kw: Any) -> None:
        self.events.append(("on_store_down", kw))

    def on_store_up(self, **kw: Any) -> None:
        self.events.append(("on_store_up", kw))

    def on_dedup_fallback(self, **kw: Any) -> None:
        self.events.append(("on_dedup_fallback", kw))


class Exploding(GatewayHooks):
    """Every hook raises."""

    def _boom(self, **kw: Any) -> None:
        raise RuntimeError("hook exploded")

    on_failover = on_namespace_down = on_namespace_up = _boom
    on_buffered = on_replayed = on_duplicate = _boom


async def fast_sleep(seconds: float) -> None:
    """Tenacity backoffs (and the recovery loop) without the real waits."""
    await anyio.sleep(min(seconds, 0.005))


async def wait_for(predicate: Callable[[], bool], within: float = 10.0,
                   step: float = 0.02) -> None:
    """Poll ``predicate`` until true; fail after ``within`` seconds."""
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {within} s")
        await anyio.sleep(step)


def wait_for_sync(predicate: Callable[[], bool], within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {within} s")
        time.sleep(0.02)


class Namespaces:
    """The two local namespaces of a test, administered and inspected directly."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.primary = LocalNamespace("primary", data_dir=data_dir)
        self.secondary = LocalNamespace("secondary", data_dir=data_dir)

    def __getitem__(self, name: str) -> LocalNamespace:
        return {"primary": self.primary, "secondary": self.secondary}[name]

    def count(self, name: str, entity: str = ENTITY) -> int:
        """Messages in the queue (locked ones too)."""
        for info in self[name].entities():
            if info.name == entity:
                return info.active_count
        return 0

    async def put(self, name: str, *messages: Message, entity: str = ENTITY) -> None:
        """Send straight to one namespace, bypassing the gateway."""
        async with LocalTransport(name, data_dir=self.data_dir) as t:
            await t.send(entity, list(messages))

    async def drain_ids(self, name: str, entity: str = ENTITY) -> list[str]:
        """Receive and complete everything in the queue; the ids in delivery order."""
        ids: list[str] = []
        async with LocalTransport(name, data_dir=self.data_dir) as t:
            while True:
                got = await t.receive(entity, max_messages=100, max_wait=0.0)
                if not got:
                    return ids
                for r in got:
                    ids.append(r.message_id)
                    await t.complete(r)

    def close(self) -> None:
        self.primary.close()
        self.secondary.close()


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    path = tmp_path / "namespaces"
    path.mkdir()
    return path


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def ns(data_dir: Path) -> Iterator[Namespaces]:
    namespaces = Namespaces(data_dir)
    namespaces.primary.create_queue(ENTITY)
    namespaces.secondary.create_queue(ENTITY)
    yield namespaces
    namespaces.close()


@pytest.fixture
async def primary(data_dir: Path) -> AsyncIterator[FaultyTransport]:
    async with FaultyTransport(LocalTransport("primary", data_dir=data_dir)) as t:
        yield t


@pytest.fixture
async def secondary(data_dir: Path) -> AsyncIterator[FaultyTransport]:
    async with FaultyTransport(LocalTransport("secondary", data_dir=data_dir)) as t:
        yield t


@pytest.fixture
def hooks() -> Recorder:
    return Recorder()


SenderFactory = Callable[..., AsyncGeoSender]
ReceiverFactory = Callable[..., Awaitable[AsyncGeoReceiver]]


@pytest.fixture
async def make_sender(
    primary: FaultyTransport, secondary: FaultyTransport, state_dir: Path, ns: Namespaces
) -> AsyncIterator[SenderFactory]:
    """AsyncGeoSender over the faulty transports; recovery off, fast backoffs."""
    made: list[AsyncGeoSender] = []

    def make(**kw: Any) -> AsyncGeoSender:
        kw.setdefault("primary", primary)
        kw.setdefault("secondary", secondary)
        kw.setdefault("entity", ENTITY)
        kw.setdefault("state_dir", state_dir)
        kw.setdefault("recovery", False)
        kw.setdefault("sleep", fast_sleep)
        sender = AsyncGeoSender(**kw)
        made.append(sender)
        return sender

    yield make
    for sender in made:
        await sender.aclose()


@pytest.fixture
async def make_receiver(
    data_dir: Path, tmp_path: Path, ns: Namespaces
) -> AsyncIterator[ReceiverFactory]:
    """AsyncGeoReceiver on local://primary and local://secondary, a SQLite dedup store."""
    made: list[AsyncGeoReceiver] = []

    async def make(**kw: Any) -> AsyncGeoReceiver:
        kw.setdefault("primary", "local://primary")
        kw.setdefault("secondary", "local://secondary")
        kw.setdefault("entity", ENTITY)
        kw.setdefault("data_dir", data_dir)
        kw.setdefault("dedup_store", tmp_path / "dedup.db")
        kw.setdefault("poll_wait", 0.05)
        receiver = AsyncGeoReceiver(**kw)
        made.append(receiver)
        return receiver

    yield make
    for receiver in made:
        await receiver.aclose()
