"""An AMQP 1.0 namespace emulator that the unmodified Azure SDKs can connect to.

It serves Service Bus queues and Event Hubs event hubs from the embedded local
namespaces, so ``local://primary`` and the emulated ``primary`` hold the same
data; tests, drills and benchmarks run with no Azure and no Docker::

    async with Emulator({"primary": 0}, queues=["orders"], event_hubs={"telemetry": 4}) as emu:
        client = ServiceBusClient.from_connection_string(emu.connection_string("primary"))

or from the command line: ``geogateway emulator --namespace primary=5672 --queue orders``.

Emulated: SASL (ANONYMOUS, MSSBCBS, PLAIN), ``$cbs`` put-token checked against the
key, queue send (batches too), peek-lock and receive-and-delete receive, complete /
abandon / dead-letter on the link or by lock token over ``$management``, lock
renewal and expiry, peek, the dead-letter sub-queue, scheduled messages and their
cancellation, time to live (dropped or dead-lettered on expiry), a 256 KiB message
limit (configurable); every property, annotation and application property of a queue
message comes back as sent (``_convert``); event hub properties, sends by partition
id or key, reads from every kind of starting position, owner levels; the local
namespace's control file (down/up, latency, lost replies). Not emulated (refused
with ``amqp:not-implemented``, never faked): topics and subscriptions, session
receivers, deferral, transactions.

The wire layer lives in private modules: ``_codec`` (the type system), ``_frames``
(framing), ``_performatives`` (performatives and composite types) and
``_amqp_message`` (the message format); the server in ``_server``, ``_namespace``,
``_connection``, ``_session``, ``_links``, ``_router``, ``_management``,
``_servicebus``, ``_servicebus_management`` and ``_eventhubs``.
"""

from __future__ import annotations

from ._auth import DEFAULT_KEY, DEFAULT_KEY_NAME
from ._config import (
    EmulatorConfig,
    EventHubSpec,
    QueueSpec,
    load_config,
    parse_event_hub,
    parse_namespace,
)
from ._server import Emulator, EmulatorThread

__all__ = [
    "DEFAULT_KEY",
    "DEFAULT_KEY_NAME",
    "Emulator",
    "EmulatorConfig",
    "EmulatorThread",
    "EventHubSpec",
    "QueueSpec",
    "load_config",
    "parse_event_hub",
    "parse_namespace",
]
