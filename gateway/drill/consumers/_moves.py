"""Which partitions changed hands after a consumer drill's actions, and how long each
went unread: worked out from the workers' :class:`ReadSpan` records, without I/O."""

from __future__ import annotations

from collections.abc import Iterable
from itertools import pairwise

from gateway.drill._report import PartitionMove, WorkerAction
from gateway.drill.consumers._shared import ReadSpan

__all__ = ["partition_moves"]


def partition_moves(spans: Iterable[ReadSpan], actions: list[WorkerAction],
                    wall: float) -> list[PartitionMove]:
    """The partitions claimed by another worker after the first of ``actions``.

    Args:
        spans: every worker's spans of ownership (wall-clock times).
        actions: what the drill did to its workers (``at``: seconds into the drill).
        wall: the wall-clock time at which the drill started (its second 0).

    Returns:
        One :class:`PartitionMove` per change of owner, in the order they were
        claimed. The balancing among the first workers before any action is not a
        move: nothing had happened yet.
    """
    if not actions:
        return []
    by_partition: dict[str, list[ReadSpan]] = {}
    for span in sorted(spans, key=lambda s: s.claimed):
        by_partition.setdefault(span.partition, []).append(span)
    moves = []
    for owners in by_partition.values():
        for before, after in pairwise(owners):
            claimed = after.claimed - wall
            cause = _cause(actions, claimed)
            if cause is None or after.worker == before.worker:
                continue
            moves.append(PartitionMove(after.partition, before.worker, after.worker,
                                       round(claimed, 3), _unread(before, after, cause, wall)))
    return sorted(moves, key=lambda m: (m.at, m.partition))


def _cause(actions: list[WorkerAction], at: float) -> WorkerAction | None:
    """The last action at or before ``at``."""
    done = [a for a in actions if a.at <= at]
    return done[-1] if done else None


def _unread(before: ReadSpan, after: ReadSpan, cause: WorkerAction,
            wall: float) -> float | None:
    if after.first_read is None:
        return None  # nothing was left to read there
    # The old owner reads on until it lets go (a graceful hand-over), so the wait
    # starts at its last read when that came after the action; a killed owner's last
    # reads are at most a progress write old, and it read nothing after the kill.
    since = cause.at
    if before.last_read is not None and not (cause.action == "killed"
                                             and cause.worker == before.worker):
        since = max(since, before.last_read - wall)
    return round(max(0.0, after.first_read - wall - since), 3)
