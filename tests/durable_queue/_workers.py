"""Child processes for the durability tests: run as ``python _workers.py ROLE ...``."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

from durable_queue import DurableQueue, Replayer
from replication import Message


def put_forever(path: str) -> None:
    """Put messages in a loop and print each returned id (the parent SIGKILLs us)."""
    q = DurableQueue(path)
    i = 0
    while True:
        row_id = q.put("d", Message(body=b"x" * 512, message_id=f"m{i}"))
        print(row_id, i, flush=True)
        i += 1


def produce(path: str, name: str, count: str) -> None:
    """Put ``count`` messages named ``NAME-i`` over two destinations, some in batches.

    Message ``i`` goes to ``d{(i // 5) % 2}``: five by ``put_many``, five by ``put``.
    """
    q = DurableQueue(path, busy_timeout=60)
    i, n = 0, int(count)
    while i < n:
        dest = f"d{(i // 5) % 2}"
        if i % 10 == 0 and i + 5 <= n:
            q.put_many(dest, [Message(body=b"b", message_id=f"{name}-{i + k}") for k in range(5)])
            i += 5
        else:
            q.put(dest, Message(body=b"b", message_id=f"{name}-{i}"))
            i += 1
    q.close()


def replay(path: str, out: str, stop_file: str) -> None:
    """Drain both destinations under leases until the stop file exists and all is sent."""
    q = DurableQueue(path, busy_timeout=60)
    with open(out, "a") as fp:

        def send(batch: object) -> None:
            for m in batch:  # type: ignore[attr-defined]
                fp.write(m.message_id + "\n")
            fp.flush()

        while True:
            stopping = Path(stop_file).exists()
            for dest in ("d0", "d1"):
                r = Replayer(q, dest, lease_seconds=10, batch_size=20)
                if r.acquire():
                    try:
                        r.drain(send)
                    finally:
                        r.release()
            if stopping and len(q) == 0:
                break
            time.sleep(0.01)
    q.close()


if __name__ == "__main__":
    roles: dict[str, Callable[..., None]] = {
        "put_forever": put_forever,
        "produce": produce,
        "replay": replay,
    }
    roles[sys.argv[1]](*sys.argv[2:])
