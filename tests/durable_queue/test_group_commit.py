"""Group commit: concurrent puts from threads share transactions."""

from __future__ import annotations

import threading
from pathlib import Path

from durable_queue import DurableQueue
from durable_queue._group_commit import GroupCommitter
from replication import QueueFull

from .conftest import msg


def test_threads_share_commits_and_nothing_is_lost(queue: DurableQueue) -> None:
    threads, per_thread = 8, 40
    results: dict[str, int] = {}
    start = threading.Barrier(threads)

    def worker(t: int) -> None:
        start.wait()
        for i in range(per_thread):
            results[f"t{t}-{i}"] = queue.put(f"d{t % 2}", msg(f"t{t}-{i}"))

    pool = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    total = threads * per_thread
    stored = {s.message.message_id: s.id for s in queue.peek(limit=10_000)}
    assert stored == results and len(stored) == total
    assert len(set(results.values())) == total
    assert queue.commits < total, "no put shared a commit"
    # each thread's own puts are FIFO
    for t in range(threads):
        ids = [results[f"t{t}-{i}"] for i in range(per_thread)]
        assert ids == sorted(ids)


def test_queue_full_hits_only_the_puts_that_do_not_fit(queue_path: Path) -> None:
    q = DurableQueue(queue_path, max_messages=50)
    outcomes: list[object] = []

    def worker(t: int) -> None:
        for i in range(20):
            try:
                outcomes.append(q.put("d", msg(f"t{t}-{i}")))
            except QueueFull as exc:
                outcomes.append(exc)

    pool = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    stored = [o for o in outcomes if isinstance(o, int)]
    assert len(stored) == 50 and len(outcomes) == 80
    assert len(q) == 50
    q.close()


def test_committer_reports_per_item_outcomes() -> None:
    def commit(items: list[int]) -> list[int | BaseException]:
        return [ValueError(str(i)) if i < 0 else i * 10 for i in items]

    committer: GroupCommitter[int, int] = GroupCommitter(commit)
    assert committer.submit(3) == 30
    try:
        committer.submit(-1)
    except ValueError as exc:
        assert str(exc) == "-1"
    else:
        raise AssertionError("expected ValueError")


def test_committer_failure_reaches_every_waiter() -> None:
    release = threading.Event()
    entered = threading.Event()
    calls: list[list[int]] = []

    def commit(items: list[int]) -> list[int | BaseException]:
        calls.append(items)
        outcomes: list[int | BaseException] = list(items)
        if len(calls) == 1:
            entered.set()
            release.wait(5)
            return outcomes
        raise OSError("disk gone")

    committer: GroupCommitter[int, int] = GroupCommitter(commit)
    errors: list[BaseException] = []

    def follower(i: int) -> None:
        try:
            committer.submit(i)
        except OSError as exc:
            errors.append(exc)

    leader = threading.Thread(target=committer.submit, args=(0,))
    leader.start()
    assert entered.wait(5)
    followers = [threading.Thread(target=follower, args=(i,)) for i in range(1, 4)]
    for thread in followers:
        thread.start()
    # wait until all three are parked behind the leader
    for _ in range(500):
        if len(committer._pending) == 3:
            break
        threading.Event().wait(0.01)
    release.set()
    leader.join()
    for thread in followers:
        thread.join()
    assert len(errors) == 3
    assert calls[1] == [1, 2, 3] or sorted(x for c in calls[1:] for x in c) == [1, 2, 3]
