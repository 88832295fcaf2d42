"""Build a real queue file and damage one page in its middle (no mocks)."""

from __future__ import annotations

from pathlib import Path

from durable_queue import DurableQueue
from replication import Message

PAGE = 4096


def body(i: int) -> bytes:
    """A ~800-byte body that names its message, so its page can be found in the file."""
    return f"MSG{i:05d}".encode() * 100


def damaged_queue(path: Path, destination: str, count: int = 300, *, at: int = 150) -> None:
    """Put ``count`` messages ``m0..`` for ``destination``, close the file (its WAL is
    checkpointed), then overwrite the page holding message ``at`` with garbage."""
    q = DurableQueue(path)
    try:
        q.put_many(destination, [Message(body(i), message_id=f"m{i}") for i in range(count)])
    finally:
        q.close()
    data = bytearray(path.read_bytes())
    page = data.index(f"MSG{at:05d}".encode()) // PAGE
    assert 1 < page < len(data) // PAGE - 1, "the damaged page must be in the middle"
    data[page * PAGE : (page + 1) * PAGE] = b"\xa5" * PAGE
    path.write_bytes(bytes(data))
