"""The Service Bus transport's options, and the SDK client its two halves share."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from azure.servicebus.aio import ServiceBusClient

from gateway.transports.sdk import Outcome, SdkOptions, SdkTransport
from gateway.transports.servicebus._errors import outcome as _outcome
from replication import ConfigError

__all__ = ["ServiceBusBase", "ServiceBusOptions"]


@dataclass(frozen=True, kw_only=True)
class ServiceBusOptions(SdkOptions):
    """Options of :class:`~.servicebus.ServiceBusTransport` (see :class:`SdkOptions` for the rest).

    Args:
        max_lock_renewal_duration: seconds the lock of a peek-locked message is
            renewed while it is not settled; 0 turns renewal off.
        prefetch_count: messages a receiver fetches ahead (the SDK's default, 0,
            keeps unreceived messages available to other receivers).
        keep_alive: seconds between the SDK's keep-alive reads on an idle link (its
            default is 30); 0 turns them off, as azure-eventhub's producer has them.
            With them on, an SDK sender or receiver that failed waits for its
            keep-alive task (which sleeps a second at a time) before it reports the
            error: up to a second more before a failover. A connection the service
            drops while idle is reopened by the next call (a send's retry).
    """

    max_lock_renewal_duration: float = 300.0
    prefetch_count: int = 0
    keep_alive: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        value = self.max_lock_renewal_duration
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
            raise ConfigError(
                f"max_lock_renewal_duration must be a number of seconds >= 0, not {value!r}")
        for name in ("prefetch_count", "keep_alive"):
            count = getattr(self, name)
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise ConfigError(f"{name} must be a whole number >= 0, not {count!r}")

    def handler_kwargs(self) -> dict[str, Any]:
        """What every SDK sender and receiver is given: they do not inherit these
        from their client."""
        return {"socket_timeout": self.socket_timeout, "keep_alive": self.keep_alive}


class ServiceBusBase(SdkTransport):
    """What the sending and receiving halves of :class:`~.servicebus.ServiceBusTransport`
    share: its options and its one SDK client (reopened after :meth:`aclose`)."""

    options: ServiceBusOptions
    _factory: Callable[[], ServiceBusClient]
    _client: ServiceBusClient | None

    def _outcome(self, exc: BaseException) -> Outcome:
        return _outcome(exc)

    def _sdk(self) -> ServiceBusClient:
        if self._client is None:
            self._client = self._factory()
        return self._client
