"""The gateway over the Azure SDKs, against two emulated Service Bus namespaces.

`geogateway emulator` serves the embedded namespaces to the unmodified azure-servicebus
client; here it runs in a background thread. With real namespaces, only the connection
strings change.

Run: python examples/azure_sdk_on_the_emulator.py
"""

import tempfile
import time

from gateway import GeoReceiver, GeoSender, Message, NamespaceConfig
from gateway.emulator import Emulator, EmulatorThread
from gateway.transports import LocalNamespace

with tempfile.TemporaryDirectory() as data_dir, EmulatorThread(
    Emulator({"primary": 0, "secondary": 0}, data_dir=data_dir, queues=["orders"])
) as emulator:
    primary, secondary = (
        NamespaceConfig(connection_string=emulator.connection_string(name), name=name)
        for name in ("primary", "secondary")
    )
    print("primary:", primary)  # the key is never shown
    with GeoSender(primary=primary, secondary=secondary, entity="orders",
                   data_dir=data_dir, state_dir=data_dir) as sender:
        result = sender.send(Message(b"order 1", message_id="order-1"))
        print("order-1 accepted by", result.namespaces)
        # Take the primary down: the emulator closes and refuses its connections.
        LocalNamespace("primary", data_dir=data_dir).down()
        time.sleep(0.3)  # the emulator applies it within 0.1 s
        result = sender.send(Message(b"order 2", message_id="order-2"))
        print("order-2 accepted by", result.namespaces, "failed over:", result.failed_over)
        LocalNamespace("primary", data_dir=data_dir).up()

    received = []
    with GeoReceiver(primary=primary, secondary=secondary, entity="orders",
                     dedup_store=f"{data_dir}/dedup.db", data_dir=data_dir) as receiver:
        receiver.run(lambda message: received.append(message.message_id), idle_timeout=2.0)
    print("received:", sorted(received))
