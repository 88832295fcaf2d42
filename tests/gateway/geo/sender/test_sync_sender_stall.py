"""GeoSender (sync) while a local namespace's file is locked by another process: its
loop thread is free, so the send is hedged to the other namespace at its deadline."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

from gateway import DeadlinePolicy, GeoSender, Message, ReplicationPolicy
from gateway.transports.local import namespace_files
from tests.gateway.conftest import ENTITY, Namespaces

HELD = 1.5  # how long the other "process" holds the primary namespace's write lock
POLICY = ReplicationPolicy(deadlines=DeadlinePolicy(floor=0.2, ceiling=0.3, initial=0.3))


def hold_lock(path: str, locked: threading.Event) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN EXCLUSIVE")
        locked.set()
        time.sleep(HELD)
        conn.execute("ROLLBACK")
    finally:
        conn.close()


def test_a_send_stalled_on_a_locked_local_namespace_is_hedged_at_its_deadline(
    data_dir: Path, state_dir: Path, ns: Namespaces,
) -> None:
    # Given a sync sender over two local namespaces, warmed up by one send
    with GeoSender(primary="local://primary", secondary="local://secondary", entity=ENTITY,
                   data_dir=data_dir, state_dir=state_dir, policy=POLICY,
                   recovery=False) as sender:
        sender.send(Message(b"warm", message_id="warm"))
        # When another process holds the primary namespace file's write lock
        locked = threading.Event()
        holder = threading.Thread(target=hold_lock,
                                  args=(namespace_files("primary", data_dir)[0], locked))
        holder.start()
        try:
            assert locked.wait(2)
            began = time.perf_counter()
            result = sender.send(Message(b"x", message_id="m1"))
            took = time.perf_counter() - began
        finally:
            holder.join()
    # Then the send was hedged to the secondary at its deadline, not held by the lock
    assert result.hedged and "secondary" in result.namespaces, result
    assert took < HELD * 0.6, f"the send took {took:.2f} s"
