"""The receiver's delivery state (``Deliveries``): its transitions, and the invariants
a random sequence of them keeps (a hypothesis state machine): no copy is lost or
handed out twice, no id is in flight twice, held copies follow their id."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from gateway.geo.receiver._deliveries import Deliveries
from gateway.transports import ReceivedMessage
from replication import Message

_SEQ = itertools.count()


def copy(message_id: str, namespace: str = "primary") -> ReceivedMessage:
    return ReceivedMessage(message=Message(b"x", message_id=message_id),
                           namespace=namespace, entity="q", lock_token=None,
                           sequence_number=next(_SEQ), delivery_count=1,
                           enqueued_time=0.0, locked_until=None)


def ids(copies: list[ReceivedMessage]) -> list[str]:
    return [c.message_id for c in copies]


def test_copies_are_taken_in_the_order_received_and_put_back_in_front() -> None:
    wakes: list[str] = []
    state = Deliveries(arrived=lambda: wakes.append("arrived"),
                       room=lambda: wakes.append("room"))
    # Given three copies received
    state.received([copy("a"), copy("b"), copy("c")])
    # When two are taken and one is put back
    a, b = state.take(2)
    state.put_back([b])
    # Then the next take starts with it, in the order received
    assert ids(state.take(5)) == ["b", "c"]
    assert ids([a]) == ["a"] and state.waiting == 0
    assert wakes == ["arrived", "room", "arrived", "room"]


def test_a_delivered_id_is_in_flight_until_done_and_its_held_copies_are_settled() -> None:
    state = Deliveries()
    first, second = copy("m", "primary"), copy("m", "secondary")
    state.deliver(first)
    state.hold(second)
    assert state.in_flight("m") and state.held == 1 and not state.caller_holds_none
    # When the caller completes it, and its mark commits
    state.complete("m")
    assert state.caller_holds_none and state.completing == 1
    # Then the id leaves, and the held copy comes out to be settled as a duplicate
    assert state.done("m") == [second]
    assert not state.in_flight("m") and state.held == 0 and state.completing == 0


def test_a_released_id_gives_its_held_copies_back_to_the_front_of_the_inbox() -> None:
    state = Deliveries()
    other = copy("other")
    state.received([other])
    held = [copy("m", "secondary"), copy("m", "secondary")]
    state.deliver(copy("m"))
    for c in held:
        state.hold(c)
    state.release("m")
    assert not state.in_flight("m") and state.held == 0
    assert state.take(3) == [*held, other]


def test_an_id_is_never_delivered_twice_at_once() -> None:
    state = Deliveries()
    state.deliver(copy("m"))
    with pytest.raises(RuntimeError, match="in flight"):
        state.deliver(copy("m", "secondary"))


def test_recall_gives_back_only_copies_held_for_another_process() -> None:
    state = Deliveries()
    mine, foreign = copy("mine", "secondary"), copy("foreign", "secondary")
    state.deliver(copy("mine"))
    state.hold(mine)
    state.hold(foreign)
    state.recall()
    assert state.take(5) == [foreign] and state.held == 1


def test_drain_hands_out_the_inbox_then_the_held_copies() -> None:
    state = Deliveries()
    waiting, held = copy("a"), copy("b", "secondary")
    state.received([waiting])
    state.deliver(copy("b"))
    state.hold(held)
    assert state.drain() == [waiting, held]
    assert state.waiting == state.held == 0


class DeliveriesMachine(RuleBasedStateMachine):
    """Drives ``Deliveries`` as the receiver does (the verdicts drawn at random) and
    checks it against a model of where each copy went."""

    def __init__(self) -> None:
        super().__init__()
        self.state = Deliveries()
        self.received: Counter[ReceivedMessage] = Counter()
        self.out: Counter[ReceivedMessage] = Counter()  # delivered, settled, drained
        self.in_flight: set[str] = set()
        self.completing: set[str] = set()

    @rule(message_ids=st.lists(st.sampled_from("abc"), max_size=4),
          namespace=st.sampled_from(["primary", "secondary"]))
    def receive(self, message_ids: list[str], namespace: str) -> None:
        copies = [copy(i, namespace) for i in message_ids]
        self.received.update(copies)
        self.state.received(copies)

    @rule(n=st.integers(1, 5), verdicts=st.lists(
        st.sampled_from(["deliver", "hold", "duplicate", "again"]), min_size=5, max_size=5))
    def sort(self, n: int, verdicts: list[str]) -> None:
        # As AsyncGeoReceiver._sort_inbox: an id in flight here is held whatever the
        # store says; the others as the store's verdict (drawn) says.
        again: list[ReceivedMessage] = []
        for received, verdict in zip(self.state.take(n), verdicts, strict=False):
            if self.state.in_flight(received.message_id) or verdict == "hold":
                self.state.hold(received)
            elif verdict == "deliver":
                self.state.deliver(received)
                self.in_flight.add(received.message_id)
                self.out[received] += 1
            elif verdict == "duplicate":
                self.out[received] += 1
            else:
                again.append(received)
        self.state.put_back(again)

    @precondition(lambda self: self.in_flight)
    @rule(data=st.data())
    def complete(self, data: st.DataObject) -> None:
        message_id = data.draw(st.sampled_from(sorted(self.in_flight)))
        self.state.complete(message_id)
        self.completing.add(message_id)

    @precondition(lambda self: self.in_flight)
    @rule(data=st.data(), how=st.sampled_from(["done", "release"]))
    def settle(self, data: st.DataObject, how: str) -> None:
        message_id = data.draw(st.sampled_from(sorted(self.in_flight)))
        if how == "done":
            settled = self.state.done(message_id)
            assert all(c.message_id == message_id for c in settled)
            self.out.update(settled)
        else:
            self.state.release(message_id)
        self.in_flight.discard(message_id)
        self.completing.discard(message_id)

    @rule()
    def recall(self) -> None:
        self.state.recall()

    @rule()
    def drain(self) -> None:
        self.out.update(self.state.drain())

    @invariant()
    def no_copy_is_lost_or_handed_out_twice(self) -> None:
        assert all(n == 1 for n in self.out.values())
        assert not self.out - self.received
        left = sum(self.received.values()) - sum(self.out.values())
        assert left == self.state.waiting + self.state.held

    @invariant()
    def the_ids_in_flight_are_the_ones_delivered_and_not_settled(self) -> None:
        for message_id in "abc":
            assert self.state.in_flight(message_id) == (message_id in self.in_flight)
        assert self.state.completing == len(self.completing)
        assert self.state.caller_holds_none == (self.in_flight <= self.completing)


DeliveriesMachine.TestCase.settings = settings(max_examples=30, stateful_step_count=25,
                                               deadline=None)
test_delivery_state_machine = DeliveriesMachine.TestCase
