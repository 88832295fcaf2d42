from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from durable_queue import DurableQueue
from replication import Message


@pytest.fixture
def queue_path(tmp_path: Path) -> Path:
    return tmp_path / "queue.db"


@pytest.fixture
def queue(queue_path: Path) -> Iterator[DurableQueue]:
    q = DurableQueue(queue_path)
    yield q
    q.close()


def msg(text: str, **kwargs: object) -> Message:
    """A message whose id and body are both ``text`` (readable assertions)."""
    return Message(body=text.encode(), message_id=text, **kwargs)  # type: ignore[arg-type]
