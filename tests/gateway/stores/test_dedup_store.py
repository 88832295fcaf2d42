"""The de-duplication stores: the window's semantics on SQLite and on PostgreSQL (the
``store`` and ``make`` fixtures run each contract test on both), and SQLite's own file
safety."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gateway.stores import PostgresDedupStore, SqliteDedupStore
from replication import ConfigError, GatewayError
from replication._dedup import Deduplicator, DedupStore, DedupWindow, Verdict
from tests.conftest import FakeClock
from tests.gateway.consumer._damage import damage_table_root, sha256
from tests.postgres import Pg

DELIVER, DUPLICATE, HOLD = Verdict.DELIVER, Verdict.DUPLICATE, Verdict.HOLD
WINDOW = DedupWindow(seconds=60, count=100)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "dedup.sqlite"


Make = Callable[..., DedupStore]


@pytest.fixture(params=["sqlite", "postgres"])
def make(request: pytest.FixtureRequest, path: Path) -> Iterator[Make]:
    """Opens stores on one window: a SQLite file, or a schema of the test server."""
    opened: list[DedupStore] = []

    def open_store(window: DedupWindow = WINDOW) -> DedupStore:
        if request.param == "sqlite":
            store: DedupStore = SqliteDedupStore(path, window=window)
        else:
            pg: Pg = request.getfixturevalue("pg")
            store = PostgresDedupStore(pg.dsn, schema=pg.schema, window=window)
        opened.append(store)
        return store

    yield open_store
    for store in opened:
        store.close()


@pytest.fixture
def store(make: Make) -> DedupStore:
    return make()


def test_is_a_dedup_store(store: DedupStore) -> None:
    assert isinstance(store, DedupStore)


def test_claim_hold_done_release(store: DedupStore) -> None:
    # Given a claim by "a"
    assert store.claim(["m1", "m2", "m1"], owner="a", now=0, lease=10) == [DELIVER, DELIVER, HOLD]
    # Then anyone (a included) is held while the lease runs
    assert store.claim(["m1"], owner="b", now=5, lease=10) == [HOLD]
    assert store.peek("m1", now=5) is HOLD
    # When "a" succeeds with m1 and fails with m2
    store.finish("m1", owner="a", succeeded=True, now=6)
    store.finish("m2", owner="a", succeeded=False, now=6)
    # Then m1 is a duplicate and m2 is free again
    assert store.claim(["m1", "m2"], owner="b", now=7, lease=10) == [DUPLICATE, DELIVER]
    assert store.peek("m1", now=7) is DUPLICATE
    # And a release by a stale owner leaves b's claim alone
    store.finish("m2", owner="a", succeeded=False, now=8)
    assert store.peek("m2", now=8) is HOLD
    # And an expired lease frees the id
    assert store.claim(["m2"], owner="c", now=17.5, lease=10) == [DELIVER]


def test_a_claim_asked_again_by_its_claimant_is_its_own(store: DedupStore) -> None:
    # Given a claim by "a" whose answer "a" never got (the connection broke after the
    # commit), so "a" asks again for the same id
    assert store.claim(["m1"], owner="a", now=0, lease=60) == [DELIVER]
    # When "a" asks again, Then it is "a"'s own claim: delivered, not held for the lease
    assert store.claim(["m1", "m1"], owner="a", now=1, lease=60) == [DELIVER, HOLD]
    # And the lease runs from the new claim; everyone else is still held
    assert store.claim(["m1"], owner="b", now=60.5, lease=60) == [HOLD]
    assert store.claim(["m1"], owner="b", now=61.5, lease=60) == [DELIVER]


def test_time_window_applies_before_pruning(store: DedupStore) -> None:
    store.claim(["m1"], owner="a", now=0, lease=10)
    store.finish("m1", owner="a", succeeded=True, now=1)
    assert store.peek("m1", now=60.9) is DUPLICATE
    assert store.peek("m1", now=61) is DELIVER
    assert store.claim(["m1"], owner="a", now=61, lease=10) == [DELIVER]


def test_prune_by_time_count_and_expired_claims(store: DedupStore) -> None:
    ids = [f"id{i:03}" for i in range(150)]
    store.claim(ids, owner="a", now=0, lease=10)
    store.finish_many(ids[:120], owner="a", succeeded=True, now=1)
    store.finish_many(ids[120:130], owner="a", succeeded=True, now=2)
    # 130 done (count bound 100), 20 claims whose lease ran out at 10
    assert store.prune(now=20, window=WINDOW) == 30 + 20
    assert store.peek("id129", now=20) is DUPLICATE
    # The oldest go first (done at 1), the newest stay (done at 2)
    done = [store.peek(m, now=20) is DUPLICATE for m in ids[:130]]
    assert done.count(True) == 100 and all(done[120:])
    assert store.prune(now=61.5, window=WINDOW) == 100 - 10
    assert store.prune(now=62, window=WINDOW) == 10


def test_window_persists_across_reopen(make: Make) -> None:
    # Given a deduplicator that handled m1 and crashed while m2 was in flight
    clock = FakeClock(1_000.0)
    first = Deduplicator(make(), lease=10, clock=clock)
    assert first.check_many(["m1", "m2"]) == [DELIVER, DELIVER]
    first.succeeded("m1")
    first._store.close()  # no release: a crash
    # When a new process opens the same store
    second = Deduplicator(make(), lease=10, clock=clock)
    # Then m1 is a duplicate and m2 is held until the dead holder's lease runs out
    assert second.check_many(["m1", "m2", "m3"]) == [DUPLICATE, HOLD, DELIVER]
    clock.now += 10
    assert second.check("m2") is DELIVER
    second.close()


def test_close_releases_claims_for_the_next_process(make: Make) -> None:
    first = Deduplicator(make())
    assert first.check("m1") is DELIVER
    first.close()
    with Deduplicator(make()) as second:
        assert second.check("m1") is DELIVER


def test_file_mode_is_0600(path: Path) -> None:
    store = SqliteDedupStore(path, window=WINDOW)
    store.claim(["m1"], owner="a", now=0, lease=10)
    for p in [path, Path(f"{path}-wal"), Path(f"{path}-shm")]:
        assert stat.S_IMODE(p.stat().st_mode) == 0o600, p
    assert store._conn is not None
    assert store._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    store.close()


def test_an_existing_wider_mode_is_narrowed(path: Path) -> None:
    path.touch(mode=0o644)
    os.chmod(path, 0o644)
    SqliteDedupStore(path).close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_corrupt_file_is_a_clear_config_error(path: Path) -> None:
    path.write_bytes(b"this is not a database, just some bytes " * 200)
    with pytest.raises(ConfigError, match=r"corrupt.*move it aside") as info:
        SqliteDedupStore(path)
    assert "\n" not in str(info.value)


def test_a_damaged_page_is_refused_at_open_without_writing(path: Path) -> None:
    # Given a dedup store whose table of done ids has a damaged page (header intact)
    store = SqliteDedupStore(path, window=DedupWindow(seconds=3600, count=100_000))
    now = time.time()
    for start in range(0, 3000, 500):
        ids = [f"message-{i:06d}" for i in range(start, start + 500)]
        store.claim(ids, owner="a", now=now, lease=60)
        store.finish_many(ids, owner="a", succeeded=True, now=now)
    store.close()
    digest = damage_table_root(path, "done")
    # When it is opened
    with pytest.raises(ConfigError) as info:
        SqliteDedupStore(path)
    # Then one line names the file, the damage and what to do
    message = str(info.value)
    assert str(path) in message and "move it aside" in message and "page" in message
    assert "\n" not in message
    # And not a byte of the file changed
    assert sha256(path) == digest


def test_other_sqlite_file_is_refused(path: Path) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE orders (id)")
    conn.close()
    with pytest.raises(ConfigError, match="not a dedup store"):
        SqliteDedupStore(path)


def test_missing_directory_and_bad_options(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot open"):
        SqliteDedupStore(tmp_path / "nope" / "dedup.sqlite")
    with pytest.raises(ConfigError, match="synchronous"):
        SqliteDedupStore(tmp_path / "d.sqlite", synchronous="SOMETIMES")


def test_closed_store_refuses_work(store: DedupStore) -> None:
    store.close()
    store.close()
    with pytest.raises(RuntimeError, match="closed"):
        store.peek("m1", now=0)


def test_a_locked_file_is_waited_for_not_raised(path: Path) -> None:
    SqliteDedupStore(path).close()
    # Given another connection holding the write lock longer than busy_timeout
    waiting = SqliteDedupStore(path, window=WINDOW, busy_timeout=0.05)
    blocker = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    blocker.execute("BEGIN IMMEDIATE")
    release = threading.Timer(0.4, lambda: blocker.execute("ROLLBACK"))
    release.start()
    try:
        # When we claim, Then it waits (retrying) instead of raising "database is locked"
        assert waiting.claim(["m1"], owner="a", now=0, lease=10) == [DELIVER]
    finally:
        release.join()
        blocker.close()
        waiting.close()


def test_a_file_locked_for_too_long_is_a_gateway_error(path: Path) -> None:
    SqliteDedupStore(path).close()
    waiting = SqliteDedupStore(path, window=WINDOW, busy_timeout=0.02, lock_timeout=0.2)
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(GatewayError, match="locked"):
            waiting.claim(["m1"], owner="a", now=0, lease=10)
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
        waiting.close()


_CHILD = textwrap.dedent(
    """
    import json, os, random, sys, time
    from collections import deque
    from gateway.stores import PostgresDedupStore, SqliteDedupStore
    from replication._dedup import Deduplicator, Verdict

    go, seed, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    rng = random.Random(seed)
    ids = [f"id{i}" for i in range(n)]
    rng.shuffle(ids)
    target, schema = os.environ["DEDUP_TARGET"], os.environ.get("DEDUP_SCHEMA")
    store = (PostgresDedupStore(target, schema=schema) if schema
             else SqliteDedupStore(target))
    dedup = Deduplicator(store, lease=30)
    open(f"{go}-ready-{seed}", "w").close()
    while not os.path.exists(go):
        time.sleep(0.005)
    waiting, delivered = deque(ids), []
    while waiting:
        batch = [waiting.popleft() for _ in range(min(rng.randint(1, 8), len(waiting)))]
        verdicts = dedup.check_many(batch)
        for mid, verdict in zip(batch, verdicts):
            if verdict is Verdict.DELIVER and rng.random() < 0.2:
                dedup.failed(mid)  # the handler failed: the broker redelivers
                waiting.append(mid)
            elif verdict is Verdict.DELIVER:
                time.sleep(0.002)  # the handler's work: keeps the two runs overlapping
                delivered.append(mid)
                dedup.succeeded(mid)
            elif verdict is Verdict.HOLD:
                waiting.append(mid)
        if all(v is Verdict.HOLD for v in verdicts):
            time.sleep(0.001)
    dedup.close()
    print(json.dumps(delivered))
    """
)


def test_two_processes_deliver_each_id_once_in_total(
    make: Make, request: pytest.FixtureRequest, path: Path, tmp_path: Path
) -> None:
    # Given two receiver processes that each get a copy of every id, in their own order
    n = 300
    go = tmp_path / "go"
    make(DedupWindow()).close()  # the tables exist before the two race
    env = {**os.environ, "DEDUP_TARGET": str(path)}
    if "pg" in request.fixturenames:
        pg: Pg = request.getfixturevalue("pg")
        env.update(DEDUP_TARGET=pg.dsn, DEDUP_SCHEMA=pg.schema)
    children = [
        subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(go), str(seed), str(n)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for seed in (1, 2)
    ]
    deadline = time.monotonic() + 30
    while not all(Path(f"{go}-ready-{seed}").exists() for seed in (1, 2)):
        assert time.monotonic() < deadline and all(c.poll() is None for c in children)
        time.sleep(0.01)
    go.touch()  # start both at once, so their claims race
    outputs = []
    for child in children:
        out, err = child.communicate(timeout=60)
        assert child.returncode == 0, err
        outputs.append(json.loads(out))
    # Then every id was delivered successfully exactly once across both
    delivered = outputs[0] + outputs[1]
    assert sorted(delivered) == sorted(f"id{i}" for i in range(n))
    assert outputs[0] and outputs[1], "the processes did not overlap"
    # And the store agrees
    with Deduplicator(make(DedupWindow())) as dedup:
        assert all(dedup.is_done(f"id{i}") for i in range(n))


def test_threads_sharing_one_deduplicator_deliver_each_id_once(make: Make) -> None:
    # Given four threads that each receive every id, in batches
    dedup = Deduplicator(make(DedupWindow()))
    ids = [f"id{i}" for i in range(200)]
    delivered: list[str] = []
    lock = threading.Lock()

    def receive(offset: int) -> None:
        mine = ids[offset:] + ids[:offset]
        for lo in range(0, len(mine), 7):
            batch = mine[lo : lo + 7]
            for mid, verdict in zip(batch, dedup.check_many(batch), strict=True):
                if verdict is DELIVER:
                    with lock:
                        delivered.append(mid)
                    dedup.succeeded(mid)

    threads = [threading.Thread(target=receive, args=(k * 50,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Then each id was delivered once; the copies seen in flight were held, not lost
    assert sorted(delivered) == sorted(ids)
    stats = dedup.stats
    assert stats.checks == 800 and stats.delivered == 200
    assert stats.duplicates + stats.held == 600
    dedup.close()
