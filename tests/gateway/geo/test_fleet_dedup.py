"""Two receiver processes, each with its own data directory as if on its own machine,
active mode: on PostgreSQL the fleet delivers each message once; with a SQLite file
each, each machine delivers it once, so the fleet delivers it twice (this module shows
both, so the PostgreSQL case can fail).

Each "machine" has its local namespaces and a ``GeoSender(mode="active")`` puts every
message in both of them, with the same MessageId on every machine: both machines hold
copies of every order, as two instances reading the same pair of namespaces would take
different copies of it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

from gateway import GeoSender, Message
from gateway.transports import LocalNamespace
from tests.postgres import Pg

ENTITY = "orders"
N = 40

_RECEIVER = textwrap.dedent(
    """
    import json, os, sys, time
    from pathlib import Path
    from gateway import GeoReceiver, PostgresDedupStore

    machine, go = Path(sys.argv[1]), Path(sys.argv[2])
    schema = os.environ.get("DEDUP_SCHEMA")
    store = (PostgresDedupStore(os.environ["DEDUP_TARGET"], schema=schema) if schema
             else machine / "dedup.db")
    delivered = []

    def handle(message):
        time.sleep(0.005)  # some work, so that the two machines overlap
        delivered.append(message.message_id)

    with GeoReceiver(primary="local://primary", secondary="local://secondary",
                     entity="orders", data_dir=machine / "namespaces", dedup_store=store,
                     prefetch=5, poll_wait=0.05) as receiver:
        (machine / "ready").touch()
        while not go.exists():
            time.sleep(0.005)
        receiver.run(handle, idle_timeout=2.5)
        stats = receiver.stats
    print(json.dumps({"delivered": delivered, "suppressed": stats.duplicates_suppressed}))
    """
)


def machine(root: Path, name: str, ids: list[str]) -> Path:
    """A data directory with its two local namespaces, every message sent in active mode."""
    home = root / name
    for namespace in ("primary", "secondary"):
        with LocalNamespace(namespace, data_dir=home / "namespaces") as local:
            local.create_queue(ENTITY)
    with GeoSender(primary="local://primary", secondary="local://secondary", entity=ENTITY,
                   mode="active", data_dir=home / "namespaces", state_dir=home / "state",
                   recovery=False) as sender:
        sender.send_batch([Message(f"order {i}", message_id=i) for i in ids])
    return home


def run_fleet(tmp_path: Path, env: dict[str, str]) -> tuple[Counter[str], int, list[Path]]:
    """Start both receiver processes at once; the deliveries of both, the suppressed
    copies, and the machines."""
    ids = [f"order-{i:03d}" for i in range(N)]
    homes = [machine(tmp_path, name, ids) for name in ("a", "b")]
    go = tmp_path / "go"
    children = [subprocess.Popen([sys.executable, "-c", _RECEIVER, str(home), str(go)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 env={**os.environ, **env})
                for home in homes]
    try:
        deadline = time.monotonic() + 30
        while not all((home / "ready").exists() for home in homes):
            assert time.monotonic() < deadline
            assert all(c.poll() is None for c in children), children[0].stderr
            time.sleep(0.01)
        go.touch()
        results = []
        for child in children:
            out, err = child.communicate(timeout=60)
            assert child.returncode == 0, err
            results.append(json.loads(out))
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.communicate()
    delivered = Counter(m for result in results for m in result["delivered"])
    assert set(delivered) == set(ids)  # nothing lost
    return delivered, sum(r["suppressed"] for r in results), homes


def left_in(home: Path) -> int:
    """Copies still in the machine's namespaces (none: every copy was settled)."""
    total = 0
    for namespace in ("primary", "secondary"):
        with LocalNamespace(namespace, data_dir=home / "namespaces") as local:
            total += sum(info.active_count for info in local.entities())
    return total


def test_two_machines_on_postgres_deliver_each_message_once(tmp_path: Path, pg: Pg) -> None:
    # Given two machines' receivers sharing the PostgreSQL window
    delivered, suppressed, homes = run_fleet(
        tmp_path, {"DEDUP_TARGET": pg.dsn, "DEDUP_SCHEMA": pg.schema})
    # Then each message was delivered once in the fleet, its three other copies settled
    duplicates = sum(count - 1 for count in delivered.values())
    assert duplicates == 0, delivered.most_common(3)
    assert suppressed == 3 * N
    assert [left_in(home) for home in homes] == [0, 0]


def test_two_machines_with_a_sqlite_file_each_deliver_each_message_twice(
    tmp_path: Path,
) -> None:
    # Given two machines' receivers, each with its own dedup.db
    delivered, suppressed, homes = run_fleet(tmp_path, {})
    # Then each machine delivered every message: the fleet delivered each one twice
    duplicates = sum(count - 1 for count in delivered.values())
    assert duplicates == N
    assert suppressed == 2 * N  # each machine suppressed only its own second copies
    assert [left_in(home) for home in homes] == [0, 0]
