"""Both namespaces down: messages wait in the durable queue on this machine's disk,
in order, and are replayed when a namespace comes back.

Run: python examples/replay_after_outage.py
Then look at a queue from the command line with `geogateway queue stats -q PATH`.
"""

import tempfile
from pathlib import Path

from durable_queue import DurableQueue
from gateway import GatewayHooks, GeoSender
from gateway.transports import LocalNamespace


class Report(GatewayHooks):
    def on_buffered(self, *, destination: str, count: int) -> None:
        print(f"  buffered {count} for {destination}")

    def on_replayed(self, *, destination: str, count: int, seconds: float) -> None:
        print(f"  replayed {count} for {destination} in {seconds:.3f} s")


with tempfile.TemporaryDirectory() as data_dir:
    queue_path = Path(data_dir) / "buffer.db"
    namespaces = [LocalNamespace(n, data_dir=data_dir) for n in ("primary", "secondary")]
    with GeoSender(
        primary="local://primary", secondary="local://secondary", entity="orders",
        durable_queue=queue_path, data_dir=data_dir, state_dir=data_dir, hooks=Report(),
        recovery=False,  # replay by hand below, to show each step
    ) as sender:
        for ns in namespaces:
            ns.down()
        print("both namespaces down:")
        for i in range(3):
            sender.send(f"order {i}")
        with DurableQueue(queue_path) as queue:
            print("waiting on disk:", len(queue))

        for ns in namespaces:
            ns.up()
        print("namespaces back:")
        sender.replay()
        with DurableQueue(queue_path) as queue:
            print("waiting on disk:", len(queue))
