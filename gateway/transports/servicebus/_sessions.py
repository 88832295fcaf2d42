"""The session receiver of the Service Bus transport (``ServiceBusTransport.accept_session``).

One SDK session receiver (``get_queue_receiver(session_id=...)``) per locked session:
its link holds the session's lock, which this receiver renews only when asked
(:meth:`~ServiceBusSessionReceiver.renew_lock`; no ``AutoLockRenewer``). The messages
it receives are settled through the transport, like any peek-locked delivery.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import anyio
from azure.servicebus.aio import ServiceBusReceiver

from gateway.transports.base import ReceivedMessage, ReceiveMode, SessionReceiver
from gateway.transports.sdk import epoch_seconds
from replication import ConfigError

__all__ = ["ServiceBusSessionReceiver"]

T = TypeVar("T")

#: Service Bus cannot receive without waiting: ``max_wait`` is raised to this.
MIN_WAIT = 0.25

#: ``ServiceBusTransport._call``: one SDK call, bounded, its errors mapped.
Call = Callable[..., Awaitable[Any]]
#: ``ServiceBusTransport._delivered``: the records of received SDK messages, held to settle.
Deliver = Callable[[list[Any], ServiceBusReceiver, str, ReceiveMode], list[ReceivedMessage]]
Close = Callable[[str, Any], Awaitable[None]]


class ServiceBusSessionReceiver(SessionReceiver):
    """The lock on one session of a Service Bus queue or subscription (see the module
    docstring and :class:`~gateway.transports.base.SessionReceiver`)."""

    def __init__(self, receiver: ServiceBusReceiver, *, namespace: str, entity: str,
                 call: Call, deliver: Deliver, close: Close, bound: float) -> None:
        session = receiver.session
        self.namespace = namespace
        self.entity = entity
        self.session_id = session.session_id
        self.locked_until = epoch_seconds(session.locked_until_utc) or time.time()
        self._receiver = receiver
        self._call, self._deliver, self._close, self._bound = call, deliver, close, bound
        self._lock = anyio.Lock()  # one receive at a time on the SDK receiver
        self._closed = False

    def __repr__(self) -> str:
        return (f"ServiceBusSessionReceiver(namespace={self.namespace!r}, "
                f"entity={self.entity!r}, session_id={self.session_id!r})")

    def _action(self, what: str) -> str:
        return f"{what} of session {self.session_id!r} of {self.entity!r}"

    async def receive(self, *, max_messages: int = 1,
                      max_wait: float = 0.0) -> list[ReceivedMessage]:
        """The session's messages, waiting up to ``max_wait`` seconds (at least 0.25).

        Raises:
            SessionLockLost: the lock expired or another receiver took the session.
            NamespaceUnavailable, OperationTimeout: the namespace failed or hangs.
        """
        if max_messages < 1:
            raise ConfigError(f"max_messages must be at least 1, got {max_messages}")
        wait = max(float(max_wait), MIN_WAIT)
        r = self._receiver
        async with self._lock:
            got = await self._call(
                self._action("receive"),
                lambda: r.receive_messages(max_message_count=max_messages, max_wait_time=wait),
                seconds=wait + self._bound)
        return self._deliver(got, r, self.entity, ReceiveMode.PEEK_LOCK)

    async def renew_lock(self) -> float:
        until = await self._call(self._action("renew the lock"), self._receiver.session.renew_lock,
                                 seconds=self._bound)
        self.locked_until = epoch_seconds(until) or self.locked_until
        return self.locked_until

    async def get_state(self) -> bytes | None:
        state = await self._call(self._action("get the state"), self._receiver.session.get_state,
                                 seconds=self._bound)
        return None if state is None else bytes(state)

    async def set_state(self, state: bytes | None) -> None:
        if state is not None and not isinstance(state, bytes | bytearray):
            raise TypeError(f"a session state is bytes or None, not {type(state).__name__}")
        session = self._receiver.session
        await self._call(self._action("set the state"), lambda: session.set_state(state),
                         seconds=self._bound)

    async def receive_deferred(self, sequence_numbers: Sequence[int]) -> list[ReceivedMessage]:
        r = self._receiver
        async with self._lock:
            got = await self._call(self._action("receive deferred messages"),
                                   lambda: r.receive_deferred_messages(list(sequence_numbers)),
                                   seconds=self._bound)
        return self._deliver(got, r, self.entity, ReceiveMode.PEEK_LOCK)

    async def aclose(self) -> None:
        """Close the SDK receiver: the session's lock is given up. Safe to call twice."""
        if not self._closed:
            self._closed = True
            await self._close(f"session receiver of {self.session_id!r}", self._receiver)
