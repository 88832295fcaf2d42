"""The receiver's pumps: one task per namespace keeps messages received ahead of the
caller, and tracks whether each namespace answers, is down or refused to be read for
good (see :class:`gateway.geo.receiver._receiver.AsyncGeoReceiver`)."""

from __future__ import annotations

import asyncio
import logging
import time

import anyio

from gateway.geo._hooks import GatewayHooks, emit
from gateway.geo._tracing import MessageTracer
from gateway.geo.receiver._deliveries import Deliveries
from gateway.transports.base import Transport
from replication import (
    DeadlineEstimator,
    MessageRejected,
    NamespaceMisconfigured,
    Operation,
    OperationTimeout,
    TransportError,
)

__all__ = ["Pumps"]

logger = logging.getLogger("geogateway")


class Pumps:
    """The receiving half of ``AsyncGeoReceiver`` (a mixin over its state)."""

    entity: str
    _transports: dict[str, Transport]
    _hooks: list[GatewayHooks]
    _deliveries: Deliveries
    _counts: dict[str, int]
    _prefetch: int
    _poll_wait: float
    _arrived: asyncio.Event
    _room: asyncio.Event
    _answer: asyncio.Event
    _down: set[str]
    _read: set[str]
    _refused: dict[str, MessageRejected | NamespaceMisconfigured]
    _fatal: Exception | None
    _pumps: list[asyncio.Task[None]]
    _closing: bool
    _estimator: DeadlineEstimator
    _tracer: MessageTracer | None
    _systems: dict[str, str]

    @property
    def down(self) -> frozenset[str]:
        """Namespaces whose last receive failed (the refused ones included)."""
        return frozenset(self._down)

    @property
    def refused(self) -> dict[str, MessageRejected | NamespaceMisconfigured]:
        """Namespaces that refused to be read for good (no such entity; unusable as
        configured: a wrong key, no rights, a host name that does not resolve), with
        their error. They are not read again; the other namespace still is."""
        return dict(self._refused)

    @property
    def namespaces(self) -> tuple[str, ...]:
        """The names of the two namespaces, primary first."""
        return tuple(self._transports)

    @property
    def answered(self) -> frozenset[str]:
        """Namespaces read at least once, refused, or found down since the start."""
        return frozenset(self._read | self._down | set(self._refused))

    async def wait_answered(self, within: float) -> frozenset[str]:
        """Wait up to ``within`` seconds until each namespace was read, refused or found
        down once (``receive`` returns as soon as one has messages); return
        :attr:`answered`. A caller that must not take an unreadable namespace for an
        empty queue checks :attr:`refused` and :attr:`down` after this."""
        self._start_pumps()
        with anyio.move_on_after(within):
            while len(self.answered) < len(self._transports) and self._fatal is None:
                self._answer.clear()
                await self._answer.wait()
        return self.answered

    def _start_pumps(self) -> None:
        if not self._pumps and not self._closing:
            loop = asyncio.get_running_loop()
            self._pumps = [loop.create_task(self._pump(ns)) for ns in self._transports]

    def _refuse(self, namespace: str, exc: MessageRejected | NamespaceMisconfigured) -> None:
        # Reading this namespace again would fail the same way: report it and stop.
        self._refused[namespace] = exc
        self._down.add(namespace)
        if len(self._refused) < len(self._transports):
            logger.warning("namespace %s refused receiving from %r for good: %s; "
                         "receiving from the other namespace only", namespace, self.entity, exc)
        else:
            detail = "; ".join(f"{ns}: {e}" for ns, e in sorted(self._refused.items()))
            # Raised to the caller by receive(); logged here for run() and the hooks.
            logger.warning("both namespaces refused receiving from %r: %s", self.entity, detail)
            self._fatal = MessageRejected(
                f"both namespaces refused receiving from {self.entity!r}: {detail}")
        emit(self._hooks, "on_namespace_down", namespace=namespace, error=exc)
        self._answer.set()
        self._arrived.set()

    def _went_down(self, namespace: str, exc: TransportError) -> None:
        if namespace not in self._down:
            logger.warning("namespace %s is down: %s; receiving from the other",
                           namespace, exc)
            self._down.add(namespace)
            emit(self._hooks, "on_namespace_down", namespace=namespace, error=exc)
        self._answer.set()
        self._arrived.set()  # receive() looks again: both may be down now

    def _no_answer(self, namespace: str, seconds: float) -> None:
        # The receive is still waiting past its deadline: the namespace hangs. It counts
        # as down (both hung is an outage, never an empty queue); the receive goes on,
        # and an answer brings the namespace back.
        self._went_down(namespace, OperationTimeout(
            f"receive from {self.entity!r} on {namespace!r} got no answer within its "
            f"deadline of {seconds:.3g} s (the namespace is not answering)",
            namespace=namespace))

    async def _pump(self, namespace: str) -> None:
        try:
            await self._pump_loop(namespace)
        except Exception as exc:
            self._broke(namespace, exc)

    def _broke(self, namespace: str, exc: Exception) -> None:
        # Not in the error tree: a bug (in a transport, a hook, the pump itself). It is
        # raised to the caller rather than retried: a pump restarted on a bug would fail
        # again and again, while receive() went on returning the other namespace's
        # messages or nothing, an outage that looks like an idle queue.
        logger.error("the receiving pump of namespace %s for %r stopped on an "
                     "unexpected error; receive() and run() raise it: %r",
                     namespace, self.entity, exc, exc_info=exc)
        if self._fatal is None:
            self._fatal = exc
        self._answer.set()
        self._arrived.set()

    async def _pump_loop(self, namespace: str) -> None:
        transport = self._transports[namespace]
        loop = asyncio.get_running_loop()
        estimator = self._estimator
        while not self._closing:
            room = self._prefetch - self._deliveries.waiting
            if room <= 0:
                self._room.clear()
                await self._room.wait()
                continue
            seconds = self._poll_wait + estimator.deadline(namespace, Operation.RECEIVE)
            watchdog = loop.call_later(seconds, self._no_answer, namespace, seconds)
            began = estimator.clock()
            began_ns = time.time_ns() if self._tracer is not None else 0
            try:
                batch = await transport.receive(
                    self.entity, max_messages=min(room, 100), max_wait=self._poll_wait
                )
            except (MessageRejected, NamespaceMisconfigured) as exc:
                # A namespace unusable as configured is read no better later: reported
                # and left, as one that refuses the entity is.
                self._refuse(namespace, exc)
                return
            except TransportError as exc:
                self._went_down(namespace, exc)
                await anyio.sleep(self._poll_wait)
                continue
            finally:
                watchdog.cancel()
            estimator.observe(namespace, Operation.RECEIVE,
                              estimator.clock() - began - self._poll_wait)
            self._read.add(namespace)
            self._answer.set()
            if namespace in self._down:
                self._down.discard(namespace)
                emit(self._hooks, "on_namespace_up", namespace=namespace)
            if batch:
                if self._tracer is not None:
                    self._tracer.received(system=self._systems[namespace], entity=self.entity,
                                          namespace=namespace, messages=batch,
                                          started_ns=began_ns)
                self._counts["received"] += len(batch)
                self._deliveries.received(batch)
