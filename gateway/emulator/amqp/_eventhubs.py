"""Event hubs over the local namespace's partitioned entities.

Readers attach to ``<hub>/ConsumerGroups/<group>/Partitions/<id>`` and start where
the link's selector filter says (``amqp.annotation.x-opt-offset > '-1'`` and the
like). Owner levels (the ``com.microsoft:epoch`` link property) work as on Event
Hubs: a reader with an equal or higher level takes the partition and the old reader
is detached with ``amqp:link:stolen``; a lower level, or none while a level is held,
is refused with the same condition. The level is also held as a lease in the
namespace file, so readers in other processes (``local://``) are fenced too; only
open readers fence: a detached link releases its lease at once, and the lease of an
attached link is renewed while it waits for credit.

A receiver that desires ``com.microsoft:enable-receiver-runtime-metric`` (the SDKs'
``track_last_enqueued_event_properties``) gets the partition's last enqueued event
in each event's delivery annotations, read when the batch was.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import time
import uuid
from typing import Any

from gateway.amqp import (
    AmqpMessage,
    Array,
    Described,
    Int,
    Long,
    Timestamp,
    encode_message,
)
from gateway.amqp.server import (
    Delivery,
    Link,
    OutgoingLink,
    Reply,
    Terminus,
    app_property,
    event_message,
    stalled,
    status,
    to_queued,
    wait_first,
)
from gateway.emulator.amqp._interfaces import NodeNamespace
from gateway.emulator.amqp._servicebus import QueueWriter
from gateway.transports import LEASE, EntityKind, Queued
from gateway.transports.base import EventPosition, PartitionEvent
from replication import GatewayError, MessageRejected, OwnershipLost

__all__ = ["HubWriter", "PartitionReader", "manage_hub", "parse_position"]

STOLEN = "amqp:link:stolen"
_LOG = logging.getLogger("gateway.emulator")
_SELECTOR = re.compile(
    r"\s*amqp\.annotation\.x-opt-(offset|sequence-number|enqueued-time)\s*(>=|>|=)\s*'([^']*)'\s*",
    re.IGNORECASE)
_MAX_READ = 300
#: How often a waiting reader renews its owner-level lease (well within LEASE).
_RENEW = LEASE / 4
_RUNTIME_METRIC = "com.microsoft:enable-receiver-runtime-metric"
_IDLE_POLL = 1.0


def parse_position(filters: Any) -> EventPosition:
    """The starting position a receiver link's source filter asks for.

    Raises:
        ValueError: a selector this emulator does not understand.
    """
    for value in (filters or {}).values():
        expression = value.value if isinstance(value, Described) else value
        if not isinstance(expression, str):
            continue
        match = _SELECTOR.fullmatch(expression)
        if match is None:
            raise ValueError(f"unsupported selector filter {expression!r}")
        field, op, text = match.group(1).lower(), match.group(2), match.group(3)
        inclusive = op != ">"
        if field == "offset" and text == "@latest":
            return EventPosition(latest=True)
        if field == "offset" and text == "-1":
            return EventPosition.earliest()
        if not text.lstrip("-").isdigit():
            raise ValueError(f"bad value {text!r} in selector filter {expression!r}")
        number = int(text)
        if field == "offset":
            return EventPosition(offset=number, inclusive=inclusive)
        if field == "sequence-number":
            return EventPosition(sequence_number=number, inclusive=inclusive)
        return EventPosition(enqueued_time=number / 1000, inclusive=inclusive)
    return EventPosition.earliest()


class HubWriter(QueueWriter):
    """A sender link to an event hub (round robin or by partition key) or one partition."""

    def batch_size(self, delivery: Delivery, outer: AmqpMessage) -> int:
        # azure-eventhub counts the whole envelope: its partition key annotation is
        # set before the batch is measured, and nothing is added after.
        return len(delivery.payload)

    def convert(self, delivery: Delivery, outer: AmqpMessage | None) -> list[Queued]:
        # Each event keeps its AMQP sections (any body: data, amqp-value, amqp-sequence,
        # none); the events of a batch take the envelope's partition key.
        if outer is None:
            return [to_queued(delivery.payload)]
        key = (outer.message_annotations or {}).get("x-opt-partition-key")
        events = [to_queued(chunk) for chunk in outer.data or ()]
        if not isinstance(key, str):
            return events
        return [q if q.message.partition_key is not None else dataclasses.replace(
            q, message=dataclasses.replace(q.message, partition_key=key)) for q in events]


class PartitionReader(Terminus):
    """A receiver link on one partition of an event hub, for one consumer group."""

    def __init__(self, namespace: NodeNamespace, hub: str, group: str, partition_id: str,
                 position: EventPosition, epoch: int | None) -> None:
        self.namespace = namespace
        self.hub, self.group, self.partition_id = hub, group, partition_id
        self.position = position
        self.epoch = epoch
        self.key = (hub, group.lower(), partition_id)
        self._wake = asyncio.Event()
        self.link: OutgoingLink | None = None
        #: This reader's lease on the owner level in the namespace file.
        self.lease = uuid.uuid4().hex
        self._leased = False  # its first fenced read claims the partition
        self._renewed = 0.0

    def claim(self, link: OutgoingLink) -> str | None:
        """Take the partition for this reader; the refusal's description if it may not."""
        readers: list[PartitionReader] = self.namespace.owners.setdefault(self.key, [])
        top = max((r.epoch for r in readers if r.epoch is not None), default=None)
        if top is not None and (self.epoch is None or self.epoch < top):
            return (f"Receiver '{link.name}' with epoch '{self.epoch}' cannot be created: a "
                    f"receiver with epoch '{top}' already exists on partition "
                    f"{self.partition_id} of {self.hub!r} (consumer group {self.group!r})")
        self.link = link
        if self.epoch is not None:
            for old in list(readers):
                old.stolen(link, self.epoch)
        readers.append(self)
        self.namespace.spawn(self._pump(link))
        return None

    def stolen(self, by: OutgoingLink, epoch: int) -> None:
        """Detach this reader's link: a reader with epoch ``epoch`` took the partition."""
        if self.link is not None:
            self.link.detach(STOLEN, (
                f"New receiver '{by.name}' with higher epoch of '{epoch}' is created hence "
                f"current receiver '{self.link.name}' with epoch '{self.epoch}' is getting "
                "disconnected"))

    def on_credit(self, link: OutgoingLink) -> None:
        self._wake.set()

    def on_detach(self, link: Link) -> None:
        readers = self.namespace.owners.get(self.key, [])
        if self in readers:
            readers.remove(self)
        self._wake.set()
        if self._leased:
            # At once (the file is used from the loop), so that a reader attaching
            # next never finds this closed reader's level.
            self._leased = False
            try:
                self.namespace.store.release([self.lease])
            except GatewayError as exc:  # the lease then ends when it runs out
                _LOG.warning("releasing the owner level of %s/%s failed: %s", self.hub,
                             self.partition_id, exc)

    async def _pump(self, link: OutgoingLink) -> None:
        try:
            await self._deliver(link)
        except Exception:
            _LOG.exception("delivering to %r failed", link.address)
            link.detach("amqp:internal-error", "the emulator failed")

    async def _deliver(self, link: OutgoingLink) -> None:
        ns = self.namespace
        while link.state != "detached":
            if await stalled(ns, link.session.connection):
                return
            if not link.can_send():
                link.drained()
                await link.wait_to_send(self._wake, timeout=_RENEW if self._leased else None)
                # No credit, so no reads: renew the lease, the link is still open.
                due = self._leased and time.monotonic() - self._renewed >= _RENEW
                if due and await self._fenced(link, 0) is None:
                    return
                continue
            changed = ns.changed(self.hub)
            read = await self._fenced(link, min(link.credit, _MAX_READ))
            if read is None:
                return
            _LOG.debug("read %s/%s from %s: %d events", self.hub, self.partition_id,
                       self.position, len(read))
            if not read:
                link.drained()
                self._wake.clear()
                await wait_first([changed.wait(), self._wake.wait()], _IDLE_POLL)
                continue
            await ns.delay()
            runtime = await self._runtime_info() if self._tracks(link) else None
            for event, sections in read:
                tag = event.sequence_number.to_bytes(8, "big")
                message = event_message(event, sections)
                message.delivery_annotations = runtime
                link.send(tag, encode_message(message), settled=True)
            self.position = EventPosition(sequence_number=read[-1][0].sequence_number)
            await link.session.connection.drain()

    async def _fenced(self, link: OutgoingLink, max_events: int,
                      ) -> list[tuple[PartitionEvent, bytes | None]] | None:
        """Read (``max_events=0``: only hold the lease); None once the link is detached."""
        try:
            return await self._read(link, max_events)
        except OwnershipLost as exc:
            link.detach(STOLEN, str(exc))
        except GatewayError as exc:
            link.detach("amqp:internal-error", str(exc))
        return None

    async def _read(self, link: OutgoingLink, max_events: int,
                    ) -> list[tuple[PartitionEvent, bytes | None]]:
        ns = self.namespace
        leased = self.epoch is not None
        found = await ns.run(
            ns.store.read_sections, self.hub, self.partition_id, position=self.position,
            max_events=max_events, owner_level=self.epoch, consumer_group=self.group,
            reader=self.lease if leased else None, claim=not self._leased)
        if leased and link.state != "detached":
            self._leased, self._renewed = True, time.monotonic()
        return found

    @staticmethod
    def _tracks(link: OutgoingLink) -> bool:
        return _RUNTIME_METRIC in {str(c) for c in link.attach.desired_capabilities or ()}

    async def _runtime_info(self) -> dict[str, Any]:
        """The last enqueued event's annotations (``track_last_enqueued_event_properties``)."""
        ns = self.namespace
        state = await ns.run(ns.store.partition_state, self.hub, self.partition_id)
        last = state.last_sequence_number
        return {
            "last_enqueued_sequence_number": Long(-1 if last is None else last),
            "last_enqueued_offset": str(-1 if state.last_offset is None else state.last_offset),
            "last_enqueued_time_utc": Timestamp(round((state.last_enqueued_time or 0) * 1000)),
            "runtime_info_retrieval_time_utc": Timestamp(round(time.time() * 1000)),
        }


async def manage_hub(namespace: NodeNamespace, request: AmqpMessage) -> Reply:
    """The Event Hubs ``READ`` operations on an event hub or one of its partitions."""
    operation, kind = app_property(request, "operation"), app_property(request, "type")
    name = app_property(request, "name")
    if operation != "READ" or kind not in ("com.microsoft:eventhub", "com.microsoft:partition"):
        return Reply(properties=status(501, f"operation {operation!r} on {kind!r} is not "
                                            "emulated"))
    entity = await namespace.run(namespace.store.find, str(name or ""))
    if entity is None or entity.kind is not EntityKind.PARTITIONED:
        return Reply(properties=status(
            404, f"The messaging entity '{namespace.name}:eventhub:{name}' could not be found"))
    if kind == "com.microsoft:eventhub":
        return Reply(properties=status(200, "OK"), value={
            "name": entity.name,
            "type": "com.microsoft:eventhub",
            "created_at": Timestamp(round(namespace.created * 1000)),
            "partition_count": Int(entity.partitions),
            "partition_ids": Array(tuple(str(p) for p in range(entity.partitions)), "string"),
        })
    pid = str(app_property(request, "partition"))
    try:
        state = await namespace.run(namespace.store.partition_state, entity.name, pid)
    except MessageRejected as exc:
        return Reply(properties=status(404, str(exc)))
    last = state.last_sequence_number
    return Reply(properties=status(200, "OK"), value={
        "name": entity.name,
        "type": "com.microsoft:partition",
        "partition": pid,
        "begin_sequence_number": Long(state.first_sequence_number),
        "last_enqueued_sequence_number": Long(-1 if last is None else last),
        "last_enqueued_offset": str(-1 if state.last_offset is None else state.last_offset),
        "last_enqueued_time_utc": Timestamp(round((state.last_enqueued_time or 0) * 1000)),
        "is_partition_empty": last is None,
    })

