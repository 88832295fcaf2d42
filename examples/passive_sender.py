"""Passive replication: send to the active namespace, fail over when it goes down.

Run: python examples/passive_sender.py
"""

import tempfile

from gateway import GeoSender, Message
from gateway.transports import LocalNamespace

with tempfile.TemporaryDirectory() as data_dir, GeoSender(
    primary="local://primary",
    secondary="local://secondary",
    entity="orders",
    mode="passive",
    data_dir=data_dir,
    state_dir=data_dir,
) as sender:
    result = sender.send(Message(b"order 1", message_id="order-1"))
    print("order-1 accepted by", result.namespaces)

    # Take the primary down, as `geogateway namespace down primary` would.
    LocalNamespace("primary", data_dir=data_dir).down()
    result = sender.send(Message(b"order 2", message_id="order-2"))
    print("order-2 accepted by", result.namespaces, "failed over:", result.failed_over)
    print("active namespace now:", sender.roles.active)
