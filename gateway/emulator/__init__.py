"""An AMQP 1.0 namespace emulator that the unmodified Azure SDKs can connect to.

It serves Service Bus queues and Event Hubs event hubs from the embedded local
namespaces, so ``local://primary`` and the emulated ``primary`` hold the same
data; tests, drills and benchmarks run with no Azure and no Docker::

    async with Emulator({"primary": 0}, queues=["orders"], event_hubs={"telemetry": 4}) as emu:
        client = ServiceBusClient.from_connection_string(emu.connection_string("primary"))

or from the command line: ``geogateway emulator --namespace primary=5672 --queue orders``.

Emulated: SASL (ANONYMOUS, MSSBCBS, PLAIN), ``$cbs`` put-token checked against the
shared access policies (Listen, Send, Manage; per namespace or entity, :class:`Policy`),
then the entity's existence (404, as the service answers), queue send (batches too),
peek-lock and receive-and-delete receive, complete / abandon / dead-letter / defer on
the link or by lock token over ``$management``, lock renewal and expiry, peek, the
dead-letter sub-queue, scheduled messages and their cancellation, deferred messages by
sequence number, sessions with their state, time to live (dropped or dead-lettered on
expiry), a 256 KiB message limit (configurable); every section of a message or event
(any body: data, amqp-value, amqp-sequence, none) comes back as sent; event hub
properties, sends by partition id or key, reads from every kind of starting position,
owner levels; topics and their subscriptions (``TOPIC/Subscriptions/SUB``) with true,
false, correlation and SQL filters and SQL actions, declared with ``topics=``
(:class:`TopicSpec`) or read from the official Service Bus emulator's ``Config.json``
(``load_config``); AMQP over WebSockets and the Service Bus administration API on each
namespace's own port; the local namespace's control file (down/up, latency, lost
replies, hang). Not emulated (refused with ``amqp:not-implemented``, never faked):
transactions, scheduling through a topic's ``$management``. Where it still differs from
the service: the emulators guide of the documentation.

Rooms: ``amqp/`` is the AMQP 1.0 emulator (its wire layer, then its links, sessions
and connections, the nodes they reach, the router, the namespaces and the server, each
importing only the layers below it), ``admin/`` the Service Bus administration API over
HTTP(S) on the namespaces' own ports (``ServiceBusAdministrationClient``; the ``serve``
extra), ``relay/`` the Azure Relay Hybrid Connections emulator (:class:`RelayEmulator`);
``_config`` and ``_auth`` are shared by them, ``_process`` runs ``geogateway emulator``
as a child process for drills, tests and benchmarks (:class:`EmulatorProcess`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway._support.lazy import lazy_dir as _lazy_dir
from gateway._support.lazy import lazy_exports as _lazy_exports
from gateway.amqp.server import DEFAULT_KEY, DEFAULT_KEY_NAME, Policy, Right, parse_policy
from gateway.emulator._config import (
    SERVICE_BUS_MAX_MESSAGE_SIZE,
    EmulatorConfig,
    EventHubSpec,
    QueueSpec,
    load_config,
    parse_event_hub,
    parse_namespace,
)
from gateway.emulator._servicebus_config import (
    SubscriptionSpec,
    TopicSpec,
    is_official,
    parse_topic,
)

if TYPE_CHECKING:
    from gateway.emulator._process import EmulatorProcess
    from gateway.emulator.amqp import Emulator, EmulatorThread
    from gateway.emulator.relay import RelayEmulator

# The servers are imported on first use (PEP 562): the command line reads the
# configuration without loading the AMQP codec or aiohttp.
_LAZY = {
    "Emulator": "gateway.emulator.amqp",
    "EmulatorProcess": "gateway.emulator._process",
    "EmulatorThread": "gateway.emulator.amqp",
    "RelayEmulator": "gateway.emulator.relay",
}

__getattr__ = _lazy_exports(__name__, _LAZY)
__dir__ = _lazy_dir(__name__, _LAZY)

__all__ = [
    "DEFAULT_KEY",
    "DEFAULT_KEY_NAME",
    "SERVICE_BUS_MAX_MESSAGE_SIZE",
    "Emulator",
    "EmulatorConfig",
    "EmulatorProcess",
    "EmulatorThread",
    "EventHubSpec",
    "Policy",
    "QueueSpec",
    "RelayEmulator",
    "Right",
    "SubscriptionSpec",
    "TopicSpec",
    "is_official",
    "load_config",
    "parse_event_hub",
    "parse_namespace",
    "parse_policy",
    "parse_topic",
]
