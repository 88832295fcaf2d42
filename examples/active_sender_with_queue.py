"""Active replication with the durable queue: every message goes to both namespaces;
a copy that cannot be sent waits on disk and is replayed when its namespace is back.

Run: python examples/active_sender_with_queue.py
"""

import tempfile
from pathlib import Path

from gateway import GeoSender
from gateway.transports import LocalNamespace

with tempfile.TemporaryDirectory() as data_dir:
    secondary = LocalNamespace("secondary", data_dir=data_dir)
    with GeoSender(
        primary="local://primary",
        secondary="local://secondary",
        entity="payments",
        mode="active",
        durable_queue=Path(data_dir) / "buffer.db",
        data_dir=data_dir,
        state_dir=data_dir,
    ) as sender:
        print("both up:", sender.send(b"payment 1").namespaces)

        secondary.down()
        result = sender.send(b"payment 2")
        print("secondary down: accepted by", result.namespaces, "buffered for", result.buffered)

        secondary.up()
        print("replayed after the outage:", sender.replay())
        print("still buffered:", sorted(sender.backlog) or "nothing")
