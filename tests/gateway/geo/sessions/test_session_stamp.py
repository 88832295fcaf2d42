"""The geo sender stamps each message of a session with its position in that session."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from durable_queue import DurableQueue
from gateway.stores import SqliteSessionStore
from gateway.transports import FaultyTransport, LocalTransport
from replication import SESSION_POSITION, ConfigError, Message, NamespaceUnavailable
from tests.gateway.conftest import ENTITY, Namespaces, SenderFactory

pytestmark = pytest.mark.anyio


def m(session: str | None, n: int, **kw: object) -> Message:
    return Message(f"{session}-{n}".encode(), message_id=f"{session}-{n}", session_id=session,
                   **kw)  # type: ignore[arg-type]


async def positions(ns: Namespaces, name: str) -> list[tuple[str, object]]:
    out = []
    async with LocalTransport(name, data_dir=ns.data_dir) as t:
        for r in await t.receive(ENTITY, max_messages=100):
            out.append((r.message_id, r.message.properties.get(SESSION_POSITION)))
            await t.complete(r)
    return out


async def test_each_session_counts_its_own_positions_in_send_order(
        make_sender: SenderFactory, ns: Namespaces, state_dir: Path) -> None:
    # Given messages of two sessions, interleaved, and one of no session
    sender = make_sender()
    await sender.send_batch([m("a", 0), m("b", 0), m(None, 0), m("a", 1)])
    await sender.send(m("b", 1, properties={"kind": "x"}))
    # Then each session's messages are numbered 0, 1, ... and the others left alone
    assert await positions(ns, "primary") == [
        ("a-0", 0), ("b-0", 0), ("None-0", None), ("a-1", 1), ("b-1", 1)]
    # And the positions file is the sender's own, under its state dir
    path = os.path.join(state_dir, "session-positions-primary-secondary.db")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


async def test_a_restarted_sender_continues_each_session(
        make_sender: SenderFactory, ns: Namespaces) -> None:
    first = make_sender()
    await first.send_batch([m("a", 0), m("a", 1)])
    await first.aclose()
    second = make_sender()
    await second.send(m("a", 2))
    assert [p for _, p in await positions(ns, "primary")] == [0, 1, 2]


async def test_a_resend_keeps_its_position_and_a_stamped_message_keeps_its_own(
        make_sender: SenderFactory, ns: Namespaces, primary: FaultyTransport,
        secondary: FaultyTransport) -> None:
    sender = make_sender()
    await sender.send(m("a", 0))
    # Given a send that fails (both namespaces down, no durable queue)
    primary.go_down()
    secondary.go_down()
    with pytest.raises(NamespaceUnavailable):
        await sender.send(m("a", 1))
    primary.come_up()
    secondary.come_up()
    await sender.replay()  # probes them: they are up again
    # When the application sends the same message again, then a new one
    await sender.send(m("a", 1))
    await sender.send(m("a", 2))
    # And a message forwarded with its position already set
    await sender.send(m("a", 7, properties={SESSION_POSITION: 7}))
    # Then the resend got the position of the first attempt: no gap
    assert [p for _, p in await positions(ns, "primary")] == [0, 1, 2, 7]


async def test_a_buffered_message_keeps_its_position_through_the_durable_queue(
        make_sender: SenderFactory, ns: Namespaces, primary: FaultyTransport,
        secondary: FaultyTransport, tmp_path: Path) -> None:
    queue = DurableQueue(tmp_path / "buffer.db")
    sender = make_sender(durable_queue=queue)
    await sender.send(m("a", 0))
    primary.go_down()
    secondary.go_down()
    result = await sender.send(m("a", 1))
    assert result.buffered
    [stored] = queue.peek()
    assert (stored.message.session_id, stored.message.properties[SESSION_POSITION]) == ("a", 1)
    primary.come_up()
    secondary.come_up()
    await sender.replay()
    assert [p for _, p in await positions(ns, "primary")] == [0, 1]
    queue.close()


def test_the_store_gives_each_position_once_and_refuses_other_files(tmp_path: Path) -> None:
    store = SqliteSessionStore(tmp_path / "s" / "positions.db")
    assert store.reserve("q", {"a": 2, "b": 1}) == {"a": 0, "b": 0}
    assert store.reserve("q", {"a": 1}) == {"a": 2}
    assert store.reserve("other", {"a": 1}) == {"a": 0}
    assert store.next("q", "a") == 3 and store.next("q", "zzz") is None
    store.advance("q", "a", 1)  # never backwards
    assert store.next("q", "a") == 3
    store.close()
    assert SqliteSessionStore(tmp_path / "s" / "positions.db").next("q", "b") == 1
    (tmp_path / "not-ours.db").write_bytes(b"this is not a database at all" * 100)
    with pytest.raises(ConfigError, match=r"not-ours\.db"):
        SqliteSessionStore(tmp_path / "not-ours.db")
