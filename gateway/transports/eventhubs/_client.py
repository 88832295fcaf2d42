"""The Event Hubs transport's options, and the producer clients its two halves share."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from azure.eventhub.aio import EventHubConsumerClient, EventHubProducerClient

from gateway.transports.eventhubs._errors import outcome as _outcome
from gateway.transports.sdk import GRACE, Outcome, SdkOptions, SdkTransport
from replication import ConfigError

__all__ = ["EventHubsBase", "EventHubsOptions"]


@dataclass(frozen=True, kw_only=True)
class EventHubsOptions(SdkOptions):
    """Options of :class:`~.eventhubs.EventHubsTransport` (see :class:`SdkOptions` for the rest).

    Args:
        prefetch: events the SDK asks for ahead on each partition link.
        buffer_size: events a background partition receive holds for
            ``read_partition`` before it pauses.
        idle_check_interval: after this many seconds without news from the
            namespace, a ``read_partition`` that found nothing asks the namespace
            for the partition's properties (the SDK's receive retries a lost
            connection silently, so an outage would otherwise look like an idle
            partition).
    """

    prefetch: int = 300
    buffer_size: int = 1000
    idle_check_interval: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("prefetch", "buffer_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be a whole number >= 1, not {value!r}")
        value = self.idle_check_interval
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ConfigError(f"idle_check_interval must be a number of seconds > 0, "
                              f"not {value!r}")


class EventHubsBase(SdkTransport):
    """What the sending and reading halves of :class:`~.eventhubs.EventHubsTransport`
    share: its options, how it makes SDK clients, and its producers (one per event hub)."""

    options: EventHubsOptions
    _new_producer: Callable[[str], EventHubProducerClient]
    _new_consumer: Callable[[str, str], EventHubConsumerClient]
    _producers: dict[str, EventHubProducerClient]

    def _outcome(self, exc: BaseException) -> Outcome:
        return _outcome(exc)

    def _producer(self, entity: str) -> EventHubProducerClient:
        producer = self._producers.get(entity)
        if producer is None:
            try:
                producer = self._new_producer(entity)
            except (ValueError, TypeError) as exc:
                raise self._map(exc, f"open {entity!r}") from exc
            self._producers[entity] = producer
        return producer

    def _bound(self) -> float:
        return self.options.operation_timeout + GRACE

