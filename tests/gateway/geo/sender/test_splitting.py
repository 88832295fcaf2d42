"""Splitting a batch refused for size: the pure plan, and its driver over a send function
(no I/O: the namespace is a function that refuses what it is told to)."""

from __future__ import annotations

import pickle
from collections.abc import Callable, Sequence

import pytest

from gateway.geo.sender._splitting import BatchSplit, send_in_parts
from replication import (
    Message,
    MessageRejected,
    MessageTooLarge,
    NamespaceUnavailable,
    OperationTimeout,
)

pytestmark = pytest.mark.anyio


def parts_sent(count: int, refuse: Callable[[range], int | None]) -> tuple[list[range], bool]:
    """Run a plan; ``refuse(part)`` says how many of the part were taken before a size
    refusal (None: taken whole). The parts taken, and whether the plan ended early."""
    plan, taken = BatchSplit(count), []
    while (part := plan.next()) is not None:
        span = range(count)[part]
        sent = refuse(span)
        if sent is None:
            plan.taken()
            taken.append(span)
        elif not plan.refused(sent):
            return taken, True
    return taken, False


def test_a_refused_batch_is_halved_until_the_parts_fit_and_keeps_its_order() -> None:
    # Given a namespace that takes at most 3 messages at a time
    taken, ended = parts_sent(10, lambda part: 0 if len(part) > 3 else None)
    # Then the ten went in halves, each once and in order
    assert [list(p) for p in taken] == [[0, 1], [2, 3, 4], [5, 6], [7, 8, 9]]
    assert not ended


def test_what_the_namespace_took_before_refusing_is_not_sent_again() -> None:
    # Given a namespace that takes the first 4 of a part, then refuses the rest of it
    calls: list[range] = []

    def refuse(part: range) -> int | None:
        calls.append(part)
        return 4 if len(calls) == 1 else None

    taken, _ = parts_sent(10, refuse)
    # Then the rest (4..9) is halved, and 0..3 never go again
    assert [list(p) for p in calls[1:]] == [[4, 5, 6], [7, 8, 9]]
    assert [list(p) for p in taken] == [[4, 5, 6], [7, 8, 9]]


def test_a_single_message_refused_ends_the_plan_where_it_is() -> None:
    # Given a namespace that refuses any part holding message 5
    taken, ended = parts_sent(8, lambda part: 0 if 5 in part else None)
    # Then 0..4 went, in order, and the plan ends at 5 with 5 sent
    assert ended
    assert [i for p in taken for i in p] == [0, 1, 2, 3, 4]


def test_a_message_too_large_on_its_own_is_not_split_around() -> None:
    plan = BatchSplit(6)
    assert plan.next() == slice(0, 6)
    assert not plan.refused(0, alone=True)
    assert plan.sent == 0 and plan.splits == 0


def test_an_empty_batch_has_nothing_to_send() -> None:
    assert BatchSplit(0).next() is None


class Namespace:
    """A send function: refuses parts over ``limit`` messages, a message it never
    takes, or fails after some parts."""

    def __init__(self, limit: int = 1000, poison: str | None = None,
                 fail_after: int | None = None, known: bool = False) -> None:
        self.limit, self.poison, self.fail_after, self.known = limit, poison, fail_after, known
        self.received: list[str] = []
        self.calls = 0

    async def send(self, part: Sequence[Message]) -> None:
        self.calls += 1
        ids = [m.message_id for m in part]
        if self.fail_after is not None and self.calls > self.fail_after:
            raise NamespaceUnavailable("down", namespace="primary")
        if self.poison in ids and self.known:
            raise MessageTooLarge(f"{self.poison} is too large", message_id=self.poison)
        if len(part) > self.limit or self.poison in ids:
            raise MessageTooLarge("the batch is too large")
        self.received += ids


def batch(n: int) -> list[Message]:
    return [Message(b"x", message_id=f"m{i}") for i in range(n)]


async def test_send_in_parts_delivers_each_message_once_in_order() -> None:
    ns = Namespace(limit=7)
    await send_in_parts(ns.send, batch(50), namespace="primary")
    assert ns.received == [f"m{i}" for i in range(50)]


async def test_send_in_parts_sends_a_batch_that_fits_in_one_call() -> None:
    ns = Namespace()
    await send_in_parts(ns.send, batch(50), namespace="primary")
    assert ns.calls == 1


async def test_send_in_parts_refuses_only_the_message_too_large() -> None:
    # Given a namespace that refuses message m13 whatever part it is in
    ns = Namespace(poison="m13")
    # When 30 messages are sent
    with pytest.raises(MessageTooLarge) as caught:
        await send_in_parts(ns.send, batch(30), namespace="primary")
    # Then the 13 before it went, in order, and the error says where it stopped
    assert ns.received == [f"m{i}" for i in range(13)]
    assert (caught.value.sent, caught.value.message_id) == (13, "m13")
    assert "13 of the batch's 30 messages, from the first, were sent" in str(caught.value)


async def test_a_message_known_too_large_is_refused_with_nothing_sent() -> None:
    ns = Namespace(poison="m13", known=True)
    with pytest.raises(MessageTooLarge) as caught:
        await send_in_parts(ns.send, batch(30), namespace="primary")
    assert ns.received == [] and ns.calls == 1
    assert (caught.value.sent, caught.value.message_id) == (0, "m13")


async def test_an_outage_after_parts_landed_is_an_unknown_outcome() -> None:
    # Given a namespace that takes parts of 10, then goes down after its third call
    # (40 and 20 refused, 10 taken)
    ns = Namespace(limit=10, fail_after=3)
    with pytest.raises(OperationTimeout, match="after 10 of 40 messages landed"):
        await send_in_parts(ns.send, batch(40), namespace="primary")
    # An outage before anything landed is reported as it is
    with pytest.raises(NamespaceUnavailable):
        await send_in_parts(Namespace(fail_after=0).send, batch(40), namespace="primary")


async def test_another_refusal_after_parts_landed_says_how_many_went() -> None:
    calls = 0

    async def send(part: Sequence[Message]) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise MessageTooLarge("too large")
        if calls == 3:
            raise MessageRejected("no such entity")

    with pytest.raises(MessageRejected, match=r"after 2 of 4 messages of the batch were sent"):
        await send_in_parts(send, batch(4), namespace="primary")


def test_message_too_large_survives_pickling() -> None:
    error = pickle.loads(pickle.dumps(MessageTooLarge("x", sent=3, message_id="m3")))
    assert (str(error), error.sent, error.message_id) == ("x", 3, "m3")
