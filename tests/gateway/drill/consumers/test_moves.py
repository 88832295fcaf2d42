"""The consumer drills' partition moves, worked out from the workers' read spans."""

from __future__ import annotations

from gateway.drill import DrillReport, PartitionMove, WorkerAction
from gateway.drill.consumers._moves import partition_moves
from gateway.drill.consumers._shared import ReadSpan

WALL = 1_000_000.0  # the drill's second 0, on the wall clock


def span(partition: str, worker: str, claimed: float, first: float | None = None,
         last: float | None = None, released: float | None = None) -> ReadSpan:
    def wall(t: float | None) -> float | None:
        return None if t is None else WALL + t
    return ReadSpan(partition, worker, WALL + claimed, wall(first), wall(last), wall(released))


def test_a_killed_workers_partitions_went_unread_from_the_kill() -> None:
    # Given w2 SIGKILLed at 5 s, its partitions claimed by w1 and w3 once it expired
    actions = [WorkerAction("w2", "killed", 5.0)]
    spans = [
        # the first balancing, before anything happened: w1 hands primary/0 to w2
        span("primary/0", "w1", 0.1, 0.2, 0.9, released=1.0),
        span("primary/0", "w2", 1.0, 1.1, 4.9),
        span("primary/0", "w1", 7.0, 7.1, 9.0),
        span("secondary/1", "w2", 0.2, 0.3, 4.8),
        span("secondary/1", "w3", 7.2),  # nothing left to read there
        span("secondary/2", "w3", 0.2, 0.3, 9.0),  # never moved
    ]
    # When the moves are worked out
    moves = partition_moves(spans, actions, WALL)
    # Then only the moves after the kill count, timed from the kill (not the last read
    # w2 reported, which is older than its death)
    assert moves == [PartitionMove("primary/0", "w2", "w1", 7.0, 2.1),
                     PartitionMove("secondary/1", "w2", "w3", 7.2, None)]
    report = DrillReport(scenario="consumer-crash", mode="active", messages=1, sent=1,
                         delivered=1, lost=0, duplicates_delivered=0,
                         duplicates_suppressed=0, buffered=0, replayed=0,
                         family="consumers", worker_actions=actions, partitions_moved=moves)
    assert report.longest_unread == moves[0]
    assert dict(report.rows())["longest unread"] == "2.100 s (primary/0, w2 -> w1)"


def test_a_graceful_hand_over_is_timed_from_the_old_owners_last_read() -> None:
    # Given w3 started at 3 s, w1 stopped (SIGTERM) at 6 s, reading on until it let go
    actions = [WorkerAction("w3", "started", 3.0), WorkerAction("w1", "stopped", 6.0)]
    spans = [
        span("primary/1", "w1", 0.1, 0.2, 3.5, released=3.6),
        span("primary/1", "w3", 3.6, 3.9, 9.0),
        span("primary/2", "w1", 0.1, 0.2, 6.4, released=6.5),
        span("primary/2", "w2", 6.5, 6.6, 9.0),
    ]
    moves = partition_moves(spans, actions, WALL)
    assert moves == [PartitionMove("primary/1", "w1", "w3", 3.6, 0.4),
                     PartitionMove("primary/2", "w1", "w2", 6.5, 0.2)]
    # And a drill that did nothing to its workers moved nothing
    assert partition_moves(spans, [], WALL) == []
