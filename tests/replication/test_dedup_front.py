"""The compact in-memory window of done ids (hash set + FIFO ring)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replication._dedup_front import HashWindow, _HashSet


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.booleans(),
            # Ids near the end of a 1024-slot table, with equal low bits, make runs
            # that wrap around to slot 0.
            st.integers(1, 3000) | st.integers(0, 60).map(lambda k: k * 1024 + 1020),
        ),
        max_size=3000,
    )
)
def test_hash_set_matches_a_python_set(ops: list[tuple[bool, int]]) -> None:
    # Small ints share low bits, so probe runs are long and wrap around the table:
    # this is where backward-shift deletion goes wrong if it is wrong.
    table, model = _HashSet(), set()
    for add, h in ops:
        if add:
            assert table.add(h) is (h not in model)
            model.add(h)
        else:
            table.discard(h)
            model.discard(h)
    assert len(table) == len(model)
    for h in {h for _, h in ops}:
        assert (h in table) is (h in model)


def test_hash_set_wraparound_deletion() -> None:
    # Given a probe run that wraps from the last slot to slot 0
    table = _HashSet()
    size = 1024
    run = [size - 1, 2 * size - 1, 3 * size - 1, 1]  # homes 1023, 1023, 1023, 1
    for h in run:
        table.add(h)
    # When the head of the run is deleted, Then the rest is still found
    table.discard(size - 1)
    assert [h in table for h in run] == [False, True, True, True]
    table.discard(2 * size - 1)
    assert [h in table for h in run] == [False, False, True, True]


def test_hash_set_deletion_keeps_wrapped_members_at_home() -> None:
    # Given slots 1022, 1023 hold a run homed at 1022 and slots 0, 1 a run homed at 0
    table = _HashSet()
    members = [1022, 1024 + 1022, 1024, 2048]
    for h in members:
        table.add(h)
    # When the head of the first run is deleted, the member at slot 0 must stay put
    table.discard(1022)
    assert [h in table for h in members] == [False, True, True, True]


def test_window_evicts_by_count_and_time() -> None:
    window = HashWindow(seconds=10, count=3, key=b"k")
    hashes = [window.hash(f"id{i}") for i in range(4)]
    for t, h in enumerate(hashes):
        window.add(h, float(t))
    assert [h in window for h in hashes] == [False, True, True, True]
    assert window.expire(11.0) == 1  # done at 1.0
    assert [h in window for h in hashes] == [False, False, True, True]
    assert window.expire(100.0) == 2
    assert len(window) == 0


def test_readding_keeps_the_first_time() -> None:
    window = HashWindow(seconds=10, count=10, key=b"k")
    h = window.hash("a")
    window.add(h, 0.0)
    window.add(h, 5.0)
    assert len(window) == 1
    window.expire(10.0)
    assert h not in window


def test_hash_is_keyed_nonzero_and_stable() -> None:
    a, b = HashWindow(seconds=1, count=1, key=b"x"), HashWindow(seconds=1, count=1, key=b"y")
    assert a.hash("m") == a.hash("m") != b.hash("m")
    assert 0 < a.hash("\ud800 lone surrogate") < 2**64


@pytest.mark.parametrize("n", [50_000])
def test_memory_per_id_is_compact(n: int) -> None:
    # Given n ids in the window, after the ring has grown to hold them all
    window = HashWindow(seconds=1e9, count=n)
    for i in range(n):
        window.add(window.hash(f"{i:032x}"), float(i))
    # Then the arrays hold well under the 50 bytes per id target
    assert len(window) == n
    assert window.nbytes / n < 50
    # And steady churn at the count bound does not grow it
    before = window.nbytes
    for i in range(n, n + 5_000):
        window.add(window.hash(f"{i:032x}"), float(i))
    assert len(window) == n and window.nbytes == before


def test_default_hash_is_64_bit_and_consistent_within_the_process() -> None:
    window = HashWindow(seconds=1, count=10)
    hashes = {window.hash(f"id{i}") for i in range(1000)}
    assert len(hashes) == 1000
    assert all(0 < h < 2**64 for h in hashes)
    assert window.hash("id1") == HashWindow(seconds=1, count=10).hash("id1")
