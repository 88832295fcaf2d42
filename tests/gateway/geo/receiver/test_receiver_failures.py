"""The receiver when a settlement or a pump fails: a failed dead-letter loses no
message, and a pump that dies of an unexpected error is never taken for an empty
queue."""

from __future__ import annotations

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
