"""A damaged page in the middle of a queue file stops a replay with ``QueueCorrupt``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from durable_queue import DurableQueue, Replayer
from replication import Message, QueueCorrupt

from ._damage import damaged_queue


def test_a_damaged_middle_page_raises_from_drain_after_the_good_part(tmp_path: Path) -> None:
    # Given a queue file whose page holding message 150 (of 300) is damaged
    path = tmp_path / "queue.db"
    damaged_queue(path, "*/orders")
    sent: list[str] = []

    def send(batch: Sequence[Message]) -> None:
        sent.extend(m.message_id for m in batch)

    # When it is drained
    with DurableQueue(path) as q, pytest.raises(QueueCorrupt) as caught:
        Replayer(q, "*/orders").drain(send)
    # Then the drain raises QueueCorrupt naming the file, after sending what came
    # before the damage, each once, in order
    assert str(path) in str(caught.value)
    assert 0 < len(sent) <= 150
    assert sent == [f"m{i}" for i in range(len(sent))]


@pytest.mark.anyio
async def test_adrain_raises_it_too(tmp_path: Path) -> None:
    path = tmp_path / "queue.db"
    damaged_queue(path, "a/orders")

    async def send(batch: Sequence[Message]) -> None:
        return None

    with DurableQueue(path) as q:
        with pytest.raises(QueueCorrupt):
            await Replayer(q, "a/orders").adrain(send)
        # And the lease was given back: another replayer may take it at once
        assert q.lease_owner("a/orders", now=0.0) is None
