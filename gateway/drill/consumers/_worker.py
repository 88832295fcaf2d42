"""One receiver process of the consumer drills (``consumer-crash``, ``consumer-scale``).

Run as ``python -m gateway.drill.consumers._worker --root DIR --worker NAME``. It runs an
:class:`~gateway.aio.AsyncGeoPartitionReceiver` on the partitioned entity
``drill-events`` of the local namespaces ``primary`` and ``secondary`` under
``DIR/namespaces`` (or, when ``GEOGATEWAY_DRILL_PRIMARY`` and ``..._SECONDARY`` hold
connection strings, the emulated event hubs through the Event Hubs transport), sharing
``DIR/checkpoints.db`` (ownership and checkpoints) and
``DIR/dedup.db`` (the de-dup window) with the other workers, and records each delivery
with an *inbox handler* (``transactional=True``) in the table ``drill_delivered`` of
the dedup file, in the same transaction as the done mark::

    INSERT INTO drill_delivered (message_id, worker, at, count) VALUES (?, ?, ?, 1)
    ON CONFLICT (message_id) DO UPDATE SET count = count + 1

so a second delivery of an id is *counted*, not hidden. It prints ``ready`` once its
signal handlers are installed. SIGTERM (or SIGINT) stops it
gracefully: checkpoint, release the partitions, close, then write its de-dup counters
to ``DIR/stats/NAME.json`` (while it runs, the same counters go to
``DIR/progress/NAME.json`` every 0.2 s, with when it owned and read each partition:
:class:`PartitionReads`, from which the drill reports the partitions that moved). Its
log (stderr: ``DIR/logs/NAME.log``) says when it was asked to stop and how long the
stop took. A SIGKILLed worker writes nothing; its partitions are re-owned once its
heartbeat expires, and its in-flight claims after the lease.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import sqlite3
import time
from dataclasses import asdict
from pathlib import Path

from gateway.consumer import ProcessorSettings
from gateway.drill.consumers._shared import (
    DRILL_BALANCE,
    ENTITY,
    ReadSpan,
    connection_string_variable,
)
from gateway.geo import AsyncGeoPartitionReceiver, GatewayHooks, InboxHandler, NamespaceConfig
from gateway.transports.base import PartitionEvent
from replication import DedupStats, RetryPolicy

__all__ = ["DRILL_LEASE", "DRILL_SETTINGS", "PROGRESS_EVERY", "PartitionReads", "main"]

logger = logging.getLogger("geogateway.drill")

NAMESPACES = ("primary", "secondary")

#: Short reads, and a checkpoint every 20 events or second.
DRILL_SETTINGS = ProcessorSettings(max_batch_size=50, poll_wait=0.1,
                                   checkpoint_every_events=20, checkpoint_every_seconds=1.0)
#: A killed worker's in-flight ids are claimable again after 3 s (default 60 s).
DRILL_LEASE = 3.0
#: How often a worker writes its counters to ``DIR/progress/NAME.json`` while running.
PROGRESS_EVERY = 0.2
_RETRY = RetryPolicy(attempts=5, initial_backoff=0.05, max_backoff=0.5, max_delay=10.0)

class PartitionReads(GatewayHooks):
    """When this worker owned and read each partition: a :class:`ReadSpan` per claim.

    The partition receiver reports a partition when it is claimed (nothing read past
    its checkpoint yet), after each batch it reads (events read past the checkpoint:
    ``lag_events`` > 0), after each checkpoint, and when it is let go (``owned``
    False), which is all the drill needs to time a partition's hand-over.
    """

    def __init__(self, worker: str) -> None:
        self.worker = worker
        self.spans: list[ReadSpan] = []
        self._open: dict[str, ReadSpan] = {}

    def on_partition_progress(self, *, namespace: str, entity: str, consumer_group: str,
                              partition_id: str, owned: bool, lag_events: int,
                              oldest_unsaved_at: float | None) -> None:
        key, now = f"{namespace}/{partition_id}", time.time()
        span = self._open.get(key)
        if not owned:
            if span is not None:
                span.released = now
                del self._open[key]
        elif span is None:
            self._open[key] = span = ReadSpan(key, self.worker, claimed=now)
            self.spans.append(span)
        elif lag_events > 0:  # a batch was read (a checkpoint alone leaves no lag)
            span.first_read = span.first_read or now
            span.last_read = now


def _record(worker: str) -> InboxHandler:
    def handle(event: PartitionEvent, conn: sqlite3.Connection) -> None:
        conn.execute(
            "INSERT INTO drill_delivered (message_id, worker, at, count) VALUES (?, ?, ?, 1)"
            " ON CONFLICT (message_id) DO UPDATE SET count = count + 1",
            (event.message.message_id, worker, time.time()),
        )
    return handle


def _namespace(name: str) -> str | NamespaceConfig:
    value = os.environ.get(connection_string_variable(name))
    if not value:
        return f"local://{name}"
    return NamespaceConfig(connection_string=value, name=name, kind="eventhubs")


def _write_counters(folder: Path, worker: str, stats: DedupStats,
                    reads: PartitionReads) -> None:
    folder.mkdir(exist_ok=True)
    tmp = folder / f"{worker}.json.tmp"
    tmp.write_text(json.dumps({"worker": worker, "delivered": stats.delivered,
                               "duplicates": stats.duplicates, "held": stats.held,
                               "reads": [asdict(span) for span in reads.spans]}))
    tmp.replace(folder / f"{worker}.json")


async def _report_progress(receiver: AsyncGeoPartitionReceiver, root: Path,
                           worker: str, reads: PartitionReads) -> None:
    """Write the counters to ``progress/NAME.json`` while running, so that the drill
    sees when every copy was consumed (delivered or suppressed), and what a killed
    worker read until shortly before it died."""
    while True:
        await asyncio.to_thread(_write_counters, root / "progress", worker,
                                receiver.dedup_stats, reads)
        await asyncio.sleep(PROGRESS_EVERY)


async def run_worker(root: Path, worker: str) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    asked: list[float] = []

    def on_signal(sig: signal.Signals) -> None:
        if not asked:
            asked.append(time.monotonic())
            logger.info("%s: %s, stopping (hand-over, then stats)", worker, sig.name)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    print("ready", flush=True)  # the drill signals this process only from now on
    primary, secondary = (_namespace(ns) for ns in ("primary", "secondary"))
    reads = PartitionReads(worker)
    receiver = AsyncGeoPartitionReceiver(
        primary=primary, secondary=secondary, entity=ENTITY,
        data_dir=root / "namespaces", checkpoint_store=root / "checkpoints.db",
        dedup_store=root / "dedup.db", instance_id=worker, settings=DRILL_SETTINGS,
        balance=DRILL_BALANCE, handler_retry=_RETRY, dedup_lease=DRILL_LEASE, hooks=reads,
    )
    async with receiver:
        progress = asyncio.create_task(_report_progress(receiver, root, worker, reads))
        try:
            await receiver.run(_record(worker), stop=stop, transactional=True)
        finally:
            progress.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await progress
        stats = receiver.dedup_stats
    for folder in ("progress", "stats"):  # the final counts, in both
        _write_counters(root / folder, worker, stats, reads)
    if asked:
        logger.info("%s: stopped in %.2f s", worker, time.monotonic() - asked[0])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m gateway.drill.consumers._worker")
    parser.add_argument("--root", type=Path, required=True, help="the drill's directory")
    parser.add_argument("--worker", required=True, help="this worker's instance id")
    args = parser.parse_args(argv)
    # stderr is the worker's log file (logs/NAME.log in the drill's state folder).
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(process)d %(name)s %(levelname)s %(message)s")
    asyncio.run(run_worker(args.root, args.worker))


if __name__ == "__main__":
    main()
