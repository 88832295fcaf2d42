"""The per-session reorder buffer: the sender's order out of two namespaces' copies."""

from __future__ import annotations

import random

import pytest

from replication import SESSION_POSITION, ReorderBuffer, SessionGap, SessionOffer, session_position


def drain(buffer: ReorderBuffer[str], now: float = 0.0) -> list[str]:
    """Hand over every head, as a driver whose handler always succeeds does."""
    out: list[str] = []
    while (head := buffer.head()) is not None:
        out.append(head)
        buffer.done(head, now)
    return out


def test_positions_are_read_from_the_property() -> None:
    assert session_position({SESSION_POSITION: 7}) == 7
    assert session_position({SESSION_POSITION: "12"}) == 12
    for bad in ({}, {SESSION_POSITION: -1}, {SESSION_POSITION: True}, {SESSION_POSITION: "x"},
                {SESSION_POSITION: 1.5}):
        assert session_position(bad) is None


def test_messages_are_handed_over_in_position_order_whatever_the_arrival() -> None:
    b: ReorderBuffer[str] = ReorderBuffer("s")
    # Given positions arriving 2, 0, 3, 1
    for p in (2, 0, 3, 1):
        assert b.offer(f"m{p}", message_id=f"m{p}", position=p, now=0) is SessionOffer.BUFFERED
    # Then they come out 0, 1, 2, 3
    assert drain(b) == ["m0", "m1", "m2", "m3"]
    assert b.next_position == 4 and len(b) == 0


def test_nothing_is_handed_over_before_its_turn() -> None:
    b: ReorderBuffer[str] = ReorderBuffer("s", next_position=5)
    b.offer("m6", message_id="m6", position=6, now=0)
    assert b.head() is None
    b.offer("m5", message_id="m5", position=5, now=0)
    assert drain(b) == ["m5", "m6"]


def test_copies_of_one_message_wait_together_and_later_ones_are_duplicates() -> None:
    b: ReorderBuffer[str] = ReorderBuffer("s")
    assert b.offer("primary copy", message_id="m0", position=0, now=0) is SessionOffer.BUFFERED
    assert b.offer("secondary copy", message_id="m0", position=0, now=0) is SessionOffer.COPY
    assert b.head() == "primary copy"
    # When the first copy is handled, the other is returned to be settled as a duplicate
    assert b.done("m0", 0) == ["secondary copy"]
    # And a copy arriving after that is a duplicate
    assert b.offer("late copy", message_id="m0", position=0, now=1) is SessionOffer.DUPLICATE


def test_a_failed_head_gives_way_to_its_other_copy() -> None:
    b: ReorderBuffer[str] = ReorderBuffer("s")
    b.offer("a", message_id="m0", position=0, now=0)
    b.offer("b", message_id="m0", position=0, now=0)
    assert b.failed(0) == "a"
    assert b.head() == "b"
    assert b.failed(0) == "b"
    assert b.head() is None and len(b) == 0


def test_a_gap_is_waited_for_then_reported_and_its_message_is_late() -> None:
    b: ReorderBuffer[str] = ReorderBuffer("s", gap_timeout=10)
    b.offer("m0", message_id="m0", position=0, now=0)
    assert drain(b) == ["m0"]
    # Given positions 3 and 4 held while 1 and 2 are missing, from t=5
    b.offer("m3", message_id="m3", position=3, now=5)
    b.offer("m4", message_id="m4", position=4, now=6)
    assert b.gap_deadline() == 15
    # Then nothing is given up before the deadline
    assert b.expire_gap(14.9) is None and b.head() is None
    # And at it, the gap is reported and the buffer goes on
    assert b.expire_gap(15) == SessionGap(session_id="s", first=1, last=2, waited=10)
    assert drain(b, 15) == ["m3", "m4"]
    # And a message of the gap arriving later is late, not held
    assert b.offer("m1", message_id="m1", position=1, now=16) is SessionOffer.LATE


def test_a_gap_that_fills_in_time_is_not_reported() -> None:
    b: ReorderBuffer[str] = ReorderBuffer("s", gap_timeout=10)
    b.offer("m1", message_id="m1", position=1, now=0)
    b.offer("m0", message_id="m0", position=0, now=9)
    assert b.gap_deadline() is None
    assert drain(b, 9) == ["m0", "m1"]
    assert b.expire_gap(100) is None


def test_a_gap_is_timed_from_the_last_handover_when_it_opens_then() -> None:
    b: ReorderBuffer[str] = ReorderBuffer("s", gap_timeout=10)
    for p in (0, 2):
        b.offer(f"m{p}", message_id=f"m{p}", position=p, now=0)
    b.done("m0", 50)  # position 1 is missing from now on
    assert b.gap_deadline() == 60


def test_a_message_without_a_position_is_unordered() -> None:
    b: ReorderBuffer[str] = ReorderBuffer("s")
    assert b.offer("x", message_id="x", position=None, now=0) is SessionOffer.UNORDERED
    assert len(b) == 0


def test_removed_copies_are_forgotten() -> None:
    b: ReorderBuffer[str] = ReorderBuffer("s", gap_timeout=1)
    b.offer("a", message_id="m0", position=0, now=0)
    b.offer("c", message_id="m1", position=1, now=0)
    assert b.remove("a", 3) and not b.remove("a", 3)
    assert list(b.items()) == ["c"]
    assert b.gap_deadline() == 4  # position 0 must come back (or is given up on)


def test_ready_is_the_run_of_heads_held_in_a_row() -> None:
    b: ReorderBuffer[str] = ReorderBuffer("s")
    for p in (0, 1, 3):
        b.offer(f"m{p}", message_id=f"m{p}", position=p, now=0)
    b.offer("m1 again", message_id="m1", position=1, now=0)
    assert b.ready(10) == ["m0", "m1"] and b.ready(1) == ["m0"]
    b.done("m0", 0)
    assert b.ready(10) == ["m1"]


def test_skipping_to_a_position_returns_what_is_held_below_it() -> None:
    b: ReorderBuffer[str] = ReorderBuffer("s", next_position=2, gap_timeout=1)
    for p in (3, 5, 6):
        b.offer(f"m{p}", message_id=f"m{p}", position=p, now=0)
    assert b.skip_to(1) == []  # never backwards
    assert b.skip_to(5) == ["m3"]
    assert b.gap_deadline() is None
    assert drain(b) == ["m5", "m6"]


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        ReorderBuffer("s", next_position=-1)
    with pytest.raises(ValueError):
        ReorderBuffer("s", gap_timeout=-1)


@pytest.mark.parametrize("seed", range(20))
def test_two_namespaces_copies_in_any_interleaving_come_out_in_the_senders_order(
        seed: int) -> None:
    # Given a session of 50 messages: the first part in the primary, the rest in the
    # secondary (a failover), some in both (active duplicates, a replay), each
    # namespace delivering in its own order and the two interleaved at random
    rng = random.Random(seed)
    split = rng.randrange(50)
    primary = [p for p in range(50) if p < split or rng.random() < 0.2]
    secondary = [p for p in range(50) if p >= split or rng.random() < 0.2]
    for ns in (primary, secondary):  # a replay puts some late in its namespace
        for _ in range(3):
            if len(ns) > 1:
                ns.append(ns.pop(rng.randrange(len(ns))))
    arrivals = [("p", p) for p in primary] + [("s", p) for p in secondary]
    rng.shuffle(arrivals)
    arrivals.sort(key=lambda a: (primary if a[0] == "p" else secondary).index(a[1]))
    b: ReorderBuffer[str] = ReorderBuffer("s")
    handed: list[int] = []
    duplicates = 0
    for _, p in arrivals:
        outcome = b.offer(f"m{p}", message_id=f"m{p}", position=p, now=0)
        duplicates += outcome is SessionOffer.DUPLICATE
        assert outcome is not SessionOffer.LATE
        while (head := b.head()) is not None:
            handed.append(int(head[1:]))
            duplicates += len(b.done(head, 0))
    # Then every message came out once, in the sender's order
    assert handed == list(range(50))
    assert duplicates == len(primary) + len(secondary) - 50
