"""The receiver's settling: the bookkeeping after a group of done marks, and settling
each copy on its namespace (see :class:`gateway.geo.receiver._receiver.AsyncGeoReceiver`)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Sequence
from typing import Any

import anyio

from gateway.geo._hooks import GatewayHooks, emit
from gateway.geo._tracing import MessageTracer
from gateway.geo.receiver._deliveries import Deliveries
from gateway.geo.receiver._marks import DoneMarks
from gateway.transports.base import ReceivedMessage, Transport
from replication import DeadlineEstimator, MessageRejected, Operation, TransportError

__all__ = ["Settler"]

logger = logging.getLogger("geogateway")


class Settler:
    """The settling half of ``AsyncGeoReceiver`` (a mixin over its state)."""

    _transports: dict[str, Transport]
    _hooks: list[GatewayHooks]
    _deliveries: Deliveries
    _marks: DoneMarks[tuple[ReceivedMessage, bool]]
    _counts: dict[str, int]
    _estimator: DeadlineEstimator
    _settle_hung: set[str]
    _tracer: MessageTracer | None
    _systems: dict[str, str]
    entity: str

    def complete_nowait(self, message: ReceivedMessage) -> None:
        """Record that the handler succeeded, without waiting: the done mark is written
        and every copy settled in the background, with the marks of the messages
        completed meanwhile (what :meth:`complete` does while the caller holds other
        messages). A mark that cannot be written is raised by the next ``receive`` or
        ``complete``; the message stays unsettled and comes back.
        """
        self._counts["completed"] += 1
        self._queue_done(message, settle=True)

    def _queue_done(self, message: ReceivedMessage, *, settle: bool, marked: bool = False
                    ) -> asyncio.Future[None]:
        self._deliveries.complete(message.message_id)
        return self._marks.add(message.message_id, (message, settle), marked=marked)

    async def _on_marked(self, items: list[tuple[ReceivedMessage, bool]],
                         error: Exception | None) -> None:
        # After a group's marks committed (error None) or failed: bookkeeping for all
        # of them at once, then settle the completed ones with their held copies.
        settle: list[list[ReceivedMessage]] = []
        held_only: list[ReceivedMessage] = []
        state = self._deliveries
        for message, complete in items:
            if error is not None:
                # Not recorded as done: the message stays locked and comes back; a
                # held copy goes back to the inbox (held again while the claim lasts).
                state.release(message.message_id)
            elif complete:
                settle.append([message, *state.done(message.message_id)])
            else:  # dead-lettered already: only its held copies are left to settle
                held_only.extend(state.done(message.message_id))
        if settle or held_only:
            await self._settle_all(
                [(m, "complete") for m, *_ in settle],
                duplicates=[*(d for _, *held in settle for d in held), *held_only])

    def _raise_mark_error(self) -> None:
        error = self._marks.take_error()
        if error is not None:
            raise error

    async def _settle_duplicates(self, copies: list[ReceivedMessage]) -> None:
        await self._settle_all([], duplicates=copies)

    async def _settle_all(self, work: list[tuple[ReceivedMessage, str]], *,
                          duplicates: Sequence[ReceivedMessage] = ()) -> None:
        """Settle copies (``how`` each; ``duplicates`` are completed as duplicates) at
        once, within the longest settle deadline of their namespaces.

        One deadline for the group, not one per copy: a timer per settlement cost a
        tenth of the receive path. Settlements still running at the deadline are cut
        short and reported: a hung namespace holds up neither the other namespace's
        settlements nor the caller.
        """
        for held in duplicates:
            self._counts["duplicates_suppressed"] += 1
            emit(self._hooks, "on_duplicate", message_id=held.message_id,
                 namespace=held.namespace)
        settled = work
        work = [*work, *((held, "complete") for held in duplicates)]
        if not work:
            return
        began_ns = time.time_ns() if self._tracer is not None else 0
        estimator = self._estimator
        seconds = max(estimator.deadline(ns, Operation.SETTLE)
                      for ns in {received.namespace for received, _ in work})
        cut: list[tuple[ReceivedMessage, str]] = []
        with anyio.move_on_after(seconds) as scope:
            if len(work) == 1:
                await self._settle(*work[0], cut=cut)
            else:
                await asyncio.gather(*self._settlements(work, cut))
        if scope.cancelled_caught:
            for received, how in cut:
                self._settle_timed_out(received, how, seconds)
        if self._tracer is not None:
            self._tracer.settled(systems=self._systems, entity=self.entity, copies=settled,
                                 duplicates=duplicates, started_ns=began_ns)

    def _settle_timed_out(self, received: ReceivedMessage, how: str, seconds: float) -> None:
        # The lock expires by itself and the copy comes back; a done id is then
        # suppressed, an undone one delivered. Nothing is lost by not settling.
        namespace = received.namespace
        self._counts["unsettled"] += 1
        level = logging.INFO if namespace in self._settle_hung else logging.WARNING
        self._settle_hung.add(namespace)  # one warning per spell, not one per message
        logger.log(level, "could not %s %s on %s: no answer within its deadline of %.3g s "
                   "(the namespace is not answering); its copy comes back when its lock "
                   "expires", how, received.message_id, namespace, seconds)

    def _settlements(self, work: list[tuple[ReceivedMessage, str]],
                     cut: list[tuple[ReceivedMessage, str]]) -> list[Awaitable[None]]:
        # One per copy; the completions on a namespace whose transport completes many
        # in one call (local namespaces: one transaction) go together.
        groups: dict[str, list[ReceivedMessage]] = {}
        calls: list[Awaitable[None]] = []
        for received, how in work:
            if how == "complete" and hasattr(self._transports[received.namespace],
                                             "complete_many"):
                groups.setdefault(received.namespace, []).append(received)
            else:
                calls.append(self._settle(received, how, cut=cut))
        for namespace, group in groups.items():
            if len(group) == 1:
                calls.append(self._settle(group[0], "complete", cut=cut))
            else:
                calls.append(self._complete_group(namespace, group, cut=cut))
        return calls

    async def _complete_group(self, namespace: str, group: list[ReceivedMessage], *,
                              cut: list[tuple[ReceivedMessage, str]]) -> None:
        # As _settle, for copies completed on one namespace in one call.
        transport: Any = self._transports[namespace]
        estimator = self._estimator
        began = estimator.clock()
        try:
            refusals = await transport.complete_many(group)
        except (TransportError, MessageRejected) as exc:
            self._counts["unsettled"] += len(group)
            logger.info("could not complete %d messages on %s: %s", len(group), namespace,
                        exc)
            return
        except asyncio.CancelledError:
            cut.extend((received, "complete") for received in group)
            raise
        estimator.observe(namespace, Operation.SETTLE, estimator.clock() - began)
        self._settle_hung.discard(namespace)
        for received, refused in zip(group, refusals, strict=True):
            if refused is not None:
                self._counts["unsettled"] += 1
                logger.info("could not complete %s on %s: %s", received.message_id,
                            namespace, refused)

    async def _settle(self, received: ReceivedMessage, how: str, *,
                      cut: list[tuple[ReceivedMessage, str]]) -> None:
        # One settlement; its caller (_settle_all) bounds it, and hears in ``cut`` of
        # the ones its deadline cut short.
        namespace = received.namespace
        transport = self._transports[namespace]
        estimator = self._estimator
        began = estimator.clock()
        try:
            if how == "complete":
                await transport.complete(received)
            else:
                await transport.abandon(received)
        except (TransportError, MessageRejected) as exc:
            # As for a timeout: the copy comes back when its lock expires.
            self._counts["unsettled"] += 1
            logger.info("could not %s %s on %s: %s", how, received.message_id, namespace,
                        exc)
        except asyncio.CancelledError:
            cut.append((received, how))
            raise
        else:
            estimator.observe(namespace, Operation.SETTLE, estimator.clock() - began)
            self._settle_hung.discard(namespace)
