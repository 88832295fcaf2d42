"""A de-duplicating receiver: both namespaces hold a copy of each message (active
replication); the handler sees each MessageId once.

Run: python examples/dedup_receiver.py
"""

import tempfile
from pathlib import Path

from gateway import GeoReceiver, GeoSender, ReceivedMessage

with tempfile.TemporaryDirectory() as data_dir:
    with GeoSender(
        primary="local://primary", secondary="local://secondary", entity="events",
        mode="active", data_dir=data_dir, state_dir=data_dir,
    ) as sender:
        for i in range(5):
            sender.send(f"event {i}")

    seen: list[str] = []

    def handle(message: ReceivedMessage) -> None:
        seen.append(message.body.decode())

    with GeoReceiver(
        primary="local://primary", secondary="local://secondary", entity="events",
        dedup_store=Path(data_dir) / "dedup.db", data_dir=data_dir,
    ) as receiver:
        receiver.run(handle, idle_timeout=1.0)
        print("handled:", sorted(seen))
        print("duplicates suppressed:", receiver.stats.duplicates_suppressed)
