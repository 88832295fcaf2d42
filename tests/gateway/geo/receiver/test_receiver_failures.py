"""The receiver when a settlement or a pump fails: a failed dead-letter loses no
message, and a pump that dies of an unexpected error is never taken for an empty
queue."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import anyio
import pytest

from gateway.transports import FaultyTransport, LocalTransport, ReceivedMessage
from replication import Message, NamespaceUnavailable
from tests.gateway.conftest import ENTITY, Namespaces, ReceiverFactory

pytestmark = pytest.mark.anyio

BOUND = 3.0


class DeadLetterFails(FaultyTransport):
    """A namespace whose dead-letter calls fail while ``failing`` is set."""

    failing = False

    async def dead_letter(self, received: ReceivedMessage, *, reason: str,
                          description: str = "") -> None:
        if self.failing:
            raise NamespaceUnavailable("dead-letter failed (injected)",
                                       namespace=self.namespace)
        await super().dead_letter(received, reason=reason, description=description)


class ReceiveBreaks(FaultyTransport):
    """A namespace whose receive raises an error no transport should (a bug)."""

    async def receive(self, entity: str, *, max_messages: int = 1, max_wait: float = 0.0,
                      mode: object = None) -> list[ReceivedMessage]:
        raise RuntimeError("boom in the transport")


def dead_letters(ns: Namespaces, name: str) -> int:
    return next(i.dead_letter_count for i in ns[name].entities() if i.name == ENTITY)


async def test_a_failed_dead_letter_leaves_the_message_to_be_dead_lettered_again(
    ns: Namespaces, make_receiver: ReceiverFactory, data_dir: Path
) -> None:
    # Given a message in both namespaces, the first copy delivered, the other held
    transports = {name: DeadLetterFails(LocalTransport(name, data_dir=data_dir))
                  for name in ("primary", "secondary")}
    for name in transports:
        await ns.put(name, Message("poison", message_id="m1"))
    receiver = await make_receiver(**transports)
    with anyio.fail_after(BOUND):
        [first] = await receiver.receive(max_messages=10, max_wait=BOUND)
        while receiver.stats.held < 1:
            assert await receiver.receive(max_messages=10, max_wait=0.05) == []
    # When dead-lettering the first copy fails on its namespace
    transports[first.namespace].failing = True
    with pytest.raises(NamespaceUnavailable):
        await receiver.dead_letter(first, reason="poison")
    # Then the id is not done: the other copy is delivered, and can be dead-lettered
    with anyio.fail_after(BOUND):
        got: list[ReceivedMessage] = []
        while not got:
            got = await receiver.receive(max_messages=10, max_wait=0.1)
    [second] = got
    assert second.message_id == "m1" and second.namespace != first.namespace
    await receiver.dead_letter(second, reason="poison")
    assert dead_letters(ns, second.namespace) == 1
    assert receiver.stats.duplicates_suppressed == 0
    for t in transports.values():
        await t.aclose()


async def test_a_dead_letter_marks_the_id_done_and_settles_the_held_copy(
    ns: Namespaces, make_receiver: ReceiverFactory
) -> None:
    # Given a message in both namespaces, the first copy delivered, the other held
    for name in ("primary", "secondary"):
        await ns.put(name, Message("poison", message_id="m1"))
    receiver = await make_receiver()
    with anyio.fail_after(BOUND):
        [first] = await receiver.receive(max_messages=10, max_wait=BOUND)
        while receiver.stats.held < 1:
            assert await receiver.receive(max_messages=10, max_wait=0.05) == []
    # When the first copy is dead-lettered
    await receiver.dead_letter(first, reason="poison")
    # Then it is in its dead-letter queue, the other copy completed as a duplicate
    assert dead_letters(ns, first.namespace) == 1
    assert receiver.stats.duplicates_suppressed == 1 and receiver.stats.held == 0
    assert ns.count("primary") == ns.count("secondary") == 0


async def test_a_pump_that_breaks_is_logged_once_and_raised_by_receive(
    ns: Namespaces, make_receiver: ReceiverFactory, data_dir: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given a primary whose receive raises an unexpected error
    broken = ReceiveBreaks(LocalTransport("primary", data_dir=data_dir))
    await ns.put("secondary", Message("a", message_id="m1"))
    receiver = await make_receiver(primary=broken)
    # When the caller receives / Then the error is raised, not an empty list
    caplog.set_level(logging.ERROR, logger="geogateway")
    began = time.monotonic()
    with anyio.fail_after(BOUND), pytest.raises(RuntimeError, match="boom"):
        while True:
            await receiver.receive(max_messages=10, max_wait=0.1)
    assert time.monotonic() - began < 2.0
    # And again on the next call (never an empty queue)
    with pytest.raises(RuntimeError, match="boom"):
        await receiver.receive(max_messages=10, max_wait=0.1)
    # And it was logged once, at ERROR, with its traceback
    logged = [r for r in caplog.records if "boom" in r.getMessage() or (
        r.exc_info and "boom" in str(r.exc_info[1]))]
    assert len(logged) == 1 and logged[0].levelno == logging.ERROR
    assert logged[0].exc_info is not None
    await broken.aclose()


async def test_run_raises_the_error_that_broke_a_pump(
    ns: Namespaces, make_receiver: ReceiverFactory, data_dir: Path
) -> None:
    # Given a secondary whose receive raises an unexpected error
    broken = ReceiveBreaks(LocalTransport("secondary", data_dir=data_dir))
    receiver = await make_receiver(secondary=broken)
    handled: list[str] = []

    async def handler(message: ReceivedMessage) -> None:
        handled.append(message.message_id)

    # When run() handles messages / Then it raises the error instead of idling on
    with anyio.fail_after(BOUND), pytest.raises(RuntimeError, match="boom"):
        await receiver.run(handler)
    await broken.aclose()
