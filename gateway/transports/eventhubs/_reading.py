"""Reading event hub partitions: pull-style, on top of the SDK's push-style receive.

:class:`PartitionReader` runs one background ``receive_batch`` of a partition and
buffers what it delivers; :class:`EventHubsReading` keeps one reader per partition
and implements :meth:`EventHubsTransport.read_partition
<gateway.transports.eventhubs.EventHubsTransport.read_partition>`, which takes events
when the caller asks (see that module's docstring for when a reader is reused).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import deque

import anyio
from azure.eventhub import EventData
from azure.eventhub.aio import EventHubConsumerClient, PartitionContext

from gateway.transports.base import EventPosition, PartitionEvent
from gateway.transports.eventhubs._client import EventHubsBase
from gateway.transports.sdk import (
    CLOSE_TIMEOUT,
    body_bytes,
    check_entity,
    epoch_seconds,
    parse_offset,
    properties_from,
    starting_position,
    text_or_none,
)
from replication import (
    ConfigError,
    GatewayError,
    Message,
    NamespaceUnavailable,
    TransportError,
)

__all__ = ["EventHubsReading", "PartitionReader", "incoming_event"]

logger = logging.getLogger("gateway.transports.eventhubs")


def incoming_event(event: EventData, *, namespace: str, entity: str,
                   partition_id: str) -> PartitionEvent:
    """A partition event from an SDK event; one without a message id gets
    ``eh-<partition>-<sequence number>``, the same on every read."""
    sequence_number = event.sequence_number if event.sequence_number is not None else -1
    message_id = text_or_none(event.message_id) or f"eh-{partition_id}-{sequence_number}"
    message = Message(body_bytes(event.body), message_id=message_id,
                      partition_key=text_or_none(event.partition_key),
                      properties=properties_from(event.properties))
    return PartitionEvent(message=message, namespace=namespace, entity=entity,
                          partition_id=partition_id, sequence_number=sequence_number,
                          offset=parse_offset(event.offset),
                          enqueued_time=epoch_seconds(event.enqueued_time) or 0.0)


class PartitionReader:
    """One background ``receive_batch`` of a partition, feeding a buffer."""

    def __init__(self, client: EventHubConsumerClient, *, entity: str, partition_id: str,
                 position: EventPosition, owner_level: int | None, prefetch: int,
                 buffer_size: int, namespace: str) -> None:
        self.client = client
        self.entity, self.partition_id = entity, partition_id
        self.owner_level = owner_level
        self.position = position  # where the caller continues
        self.last: PartitionEvent | None = None
        self.events: deque[PartitionEvent] = deque()
        self.error: BaseException | None = None
        self.lock = asyncio.Lock()
        self._namespace = namespace
        self._limit = buffer_size
        self._high = -1  # the highest sequence number buffered
        self.heard = time.monotonic()  # when the SDK last delivered (or the receive began)
        self._arrived = asyncio.Event()
        self._room = asyncio.Event()
        self._started = asyncio.Event()  # the SDK's start-up requests are over
        start, inclusive = starting_position(position)
        self.task = asyncio.get_running_loop().create_task(client.receive_batch(
            self._on_batch, partition_id=partition_id, starting_position=start,
            starting_position_inclusive=inclusive, owner_level=owner_level,
            max_batch_size=prefetch, prefetch=prefetch,
            on_error=self._on_error, on_partition_initialize=self._on_initialize))
        self.task.add_done_callback(self._ended)

    def continues(self, position: EventPosition, owner_level: int | None) -> bool:
        """Whether a read at ``position`` continues where this receive stands."""
        # A pending error does not end the match: take() raises it first.
        if owner_level != self.owner_level:
            return False
        if position == self.position:
            return True
        last = self.last
        if last is None:
            return False
        if position.sequence_number is not None:
            return position.sequence_number == last.sequence_number + int(position.inclusive)
        return (position.offset is not None and not position.inclusive and last.offset >= 0
                and position.offset == last.offset)

    async def _on_batch(self, context: PartitionContext, batch: list[EventData]) -> None:
        while len(self.events) >= self._limit and self.error is None:
            # Back-pressure: the SDK's callback waits, its prefetch stops asking.
            self._room.clear()
            await self._room.wait()
        for event in batch:
            incoming = incoming_event(event, namespace=self._namespace, entity=self.entity,
                                 partition_id=self.partition_id)
            # After a silent reconnect the SDK may start over: never hand out an event twice.
            if incoming.sequence_number > self._high:
                self._high = incoming.sequence_number
                self.events.append(incoming)
        self.heard = time.monotonic()
        self._arrived.set()

    async def _on_initialize(self, context: PartitionContext) -> None:
        self._started.set()

    async def _on_error(self, context: PartitionContext, error: Exception) -> None:
        if self.error is None:
            self.error = error
        self._arrived.set()
        # Stop here: the SDK would restart the receive at its first position later.
        self.task.cancel()

    def _ended(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and self.error is None:
            self.error = task.exception() or ConnectionError("the partition receive ended")
        self._arrived.set()
        self._started.set()

    async def take(self, max_events: int, max_wait: float) -> list[PartitionEvent]:
        """Up to ``max_events`` buffered events, waiting up to ``max_wait`` for the first.

        Raises:
            BaseException: the SDK error that ended the receive (unmapped), once the
                events buffered before it are taken.
        """
        with anyio.move_on_after(max_wait):
            while not self.events and self.error is None:
                self._arrived.clear()
                await self._arrived.wait()
        taken = [self.events.popleft() for _ in range(min(max_events, len(self.events)))]
        if taken:
            self._room.set()
            self.last = taken[-1]
            self.position = EventPosition(sequence_number=self.last.sequence_number)
            return taken
        if self.error is not None:
            raise self.error
        return []

    async def stop(self) -> None:
        """Close the client, then end the receive (each step within ``CLOSE_TIMEOUT``).

        The SDK closes no connection whose opening was cancelled (its client's close
        skips a client without a session), so nothing is cancelled mid-open here: the
        receive's start-up request (the partition ids, over a connection of its own) is
        let finish, then the client's close stops the partition's receive and closes its
        link the SDK's own way, and only then is the receive task, by now asleep in the
        SDK's load-balancing loop, cancelled.
        """
        with anyio.move_on_after(CLOSE_TIMEOUT):
            await self._started.wait()
        with anyio.move_on_after(CLOSE_TIMEOUT):
            try:
                await self.client.close()
            except Exception as exc:  # the reader is dropped either way; say why it failed
                logger.debug("closing the receive of partition %s of %r failed: %r",
                             self.partition_id, self.entity, exc)
        self.task.cancel()
        with anyio.move_on_after(CLOSE_TIMEOUT):
            await asyncio.wait([self.task])


class EventHubsReading(EventHubsBase):
    """The reading half of :class:`~.eventhubs.EventHubsTransport`: one
    :class:`PartitionReader` per (event hub, consumer group, partition), and
    :meth:`read_partition` on top of them (see that module's docstring)."""

    _readers: dict[tuple[str, str, str], PartitionReader]
    _stopping: set[asyncio.Task[None]]  # readers stopping in the background

    def _init_reading(self) -> None:
        self._readers = {}
        self._stopping = set()

    async def read_partition(self, entity: str, partition_id: str, *, position: EventPosition,
                             max_events: int = 100, max_wait: float = 0.0,
                             owner_level: int | None = None,
                             consumer_group: str = "$Default") -> list[PartitionEvent]:
        """Read events of one partition after ``position``, waiting up to ``max_wait``.

        ``EventPosition.earliest()`` reads from the first event; ``latest=True`` only
        events sent after the receive starts; ``offset``, ``sequence_number`` and
        ``enqueued_time`` after that value (from it with ``inclusive``). Continuing
        reads share one background receive (see the module docstring).

        Raises:
            OwnershipLost: a reader with a higher owner level took the partition.
            MessageRejected: no such event hub or partition, or access is refused.
            NamespaceUnavailable: the namespace is down.
            ConfigError: ``max_events`` below 1.
        """
        if max_events < 1:
            raise ConfigError(f"max_events must be at least 1, got {max_events}")
        check_entity(entity)
        self._last_entity = entity
        key = (entity, consumer_group, str(partition_id))
        reader = self._readers.get(key)
        if reader is not None and not reader.continues(position, owner_level):
            self._drop_reader(key, reader)
            reader = None
        if reader is None:
            try:
                client = self._new_consumer(entity, consumer_group)
            except (ValueError, TypeError) as exc:  # e.g. not the connection string's hub
                raise self._map(exc, f"open {entity!r}") from exc
            reader = PartitionReader(client, entity=entity, partition_id=str(partition_id),
                                     position=position, owner_level=owner_level,
                                     prefetch=self.options.prefetch,
                                     buffer_size=self.options.buffer_size,
                                     namespace=self.namespace)
            self._readers[key] = reader
        action = f"read partition {partition_id} of {entity!r}"
        async with reader.lock:
            return await self._take(key, reader, action, max_events=max_events,
                                    deadline=time.monotonic() + max(0.0, float(max_wait)))

    async def _take(self, key: tuple[str, str, str], reader: PartitionReader, action: str, *,
                    max_events: int, deadline: float) -> list[PartitionEvent]:
        interval = self.options.idle_check_interval
        while True:
            now = time.monotonic()
            # Wait in slices, so that a silent outage is noticed within idle_check_interval.
            wait = max(0.0, min(deadline - now, reader.heard + interval - now))
            try:
                events = await reader.take(max_events, wait)
            except Exception as exc:
                self._drop_reader(key, reader)
                raise self._map(exc, action) from exc
            now = time.monotonic()
            if events:
                return events
            if now - reader.heard >= interval:
                await self._check(key, reader, action)
            if now >= deadline:
                return []

    async def _check(self, key: tuple[str, str, str], reader: PartitionReader, action: str) -> None:
        # The SDK's receive retries a lost connection silently: ask the namespace itself.
        properties = functools.partial(self._producer(reader.entity).get_partition_properties,
                                       reader.partition_id)
        try:
            await self._call(action, properties, seconds=self.options.probe_timeout)
        except GatewayError as exc:
            self._drop_reader(key, reader)
            if isinstance(exc, TransportError):
                raise NamespaceUnavailable(str(exc), namespace=self.namespace) from exc
            raise
        reader.heard = time.monotonic()

    def _drop_reader(self, key: tuple[str, str, str], reader: PartitionReader) -> None:
        """Forget ``reader`` and stop it in the background (aclose waits for it)."""
        if self._readers.get(key) is reader:
            del self._readers[key]
        task = asyncio.get_running_loop().create_task(reader.stop())
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)
