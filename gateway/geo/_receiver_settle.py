"""The receiver's settling: the bookkeeping after a group of done marks, and settling
each copy on its namespace (see :class:`gateway.geo._receiver.AsyncGeoReceiver`)."""

from __future__ import annotations

import asyncio
import logging
from collections import deque

from gateway._support.deadlines import within_deadline
from gateway.geo._hooks import GatewayHooks, emit
from gateway.geo._receiver_marks import DoneMarks
from gateway.transports.base import ReceivedMessage, Transport
from replication import (
    DeadlineEstimator,
    MessageRejected,
    Operation,
    OperationTimeout,
    TransportError,
)

__all__ = ["Settler"]

logger = logging.getLogger("geogateway")


class Settler:
    """The settling half of ``AsyncGeoReceiver`` (a mixin over its state)."""

    _transports: dict[str, Transport]
    _hooks: list[GatewayHooks]
    _inbox: deque[ReceivedMessage]
    _held: dict[str, list[ReceivedMessage]]
    _in_flight: set[str]
    _pending: set[str]
    _marks: DoneMarks[tuple[ReceivedMessage, bool]]
    _counts: dict[str, int]
    _estimator: DeadlineEstimator
    _settle_hung: set[str]

    def _queue_done(self, message: ReceivedMessage, *, settle: bool) -> asyncio.Future[None]:
        self._pending.add(message.message_id)
        return self._marks.add(message.message_id, (message, settle))

    async def _on_marked(self, items: list[tuple[ReceivedMessage, bool]],
                         error: Exception | None) -> None:
        # After a group's marks committed (error None) or failed: bookkeeping for all
        # of them at once, then settle the completed ones with their held copies.
        settle: list[list[ReceivedMessage]] = []
        for message, complete in items:
            self._pending.discard(message.message_id)
            self._in_flight.discard(message.message_id)
            if not complete:
                continue  # dead_letter() settles its own copies
            held = self._held.pop(message.message_id, [])
            if error is None:
                settle.append([message, *held])
            else:
                # Not recorded as done: the message stays locked and comes back; a
                # held copy goes back to the inbox (held again while the claim lasts).
                self._inbox.extendleft(reversed(held))
        if settle:
            await asyncio.gather(*(self._settle_done(copies) for copies in settle))

    async def _settle_done(self, copies: list[ReceivedMessage]) -> None:
        first, *duplicates = copies
        await self._settle(first, "complete")
        for held in duplicates:
            await self._settle_duplicate(held)

    def _raise_mark_error(self) -> None:
        error = self._marks.take_error()
        if error is not None:
            raise error

    async def _settle_duplicate(self, received: ReceivedMessage) -> None:
        self._counts["duplicates_suppressed"] += 1
        emit(self._hooks, "on_duplicate", message_id=received.message_id,
             namespace=received.namespace)
        await self._settle(received, "complete")

    async def _settle(self, received: ReceivedMessage, how: str) -> None:
        namespace = received.namespace
        transport = self._transports[namespace]
        settle = transport.complete if how == "complete" else transport.abandon
        try:
            # Within the namespace's settle deadline: a hung namespace must not hold up
            # the marks and settlements of the other one, nor the caller.
            await within_deadline(self._estimator, namespace, Operation.SETTLE,
                                  lambda: settle(received),
                                  what=f"{how} {received.message_id!r}")
        except (TransportError, MessageRejected) as exc:
            # The lock expires by itself and the copy comes back; a done id is then
            # suppressed, an undone one delivered. Nothing is lost by not settling.
            self._counts["unsettled"] += 1
            if isinstance(exc, OperationTimeout) and namespace not in self._settle_hung:
                self._settle_hung.add(namespace)  # one warning per spell, not per message
                logger.warning("could not %s %s on %s: %s; its copy comes back when its "
                               "lock expires", how, received.message_id, namespace, exc)
            else:
                logger.info("could not %s %s on %s: %s", how, received.message_id,
                            namespace, exc)
        else:
            self._settle_hung.discard(namespace)
