"""A batch a namespace refused for size goes again in halves, in order, down to one message.

The plan (:class:`BatchSplit`) is pure: which part of the batch to send next, given
what became of the part before. :func:`send_in_parts` drives it over one namespace's
send. Nothing is split until a namespace refuses a batch of several messages with
``MessageTooLarge``: the first send is the whole batch.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence

from replication import Message, MessageRejected, MessageTooLarge, OperationTimeout, TransportError

__all__ = ["BatchSplit", "send_in_parts"]

logger = logging.getLogger("geogateway")


class BatchSplit:
    """Which part of a batch of ``count`` messages to send next.

    Parts go in the batch's order, so the messages reach the namespace in that order.
    A part refused for size, after the namespace took its first ``sent`` messages, is
    replaced by the two halves of the rest; a part of one message refused, or a
    message known to be too large on its own, ends the plan.

    Attributes:
        sent: how many messages, from the first, were taken so far.
        splits: how many refused parts were split.
    """

    def __init__(self, count: int) -> None:
        self.count = count
        self.sent = 0
        self.splits = 0
        # The parts still to send as [start, stop) ranges; the next one is last.
        self._parts: list[tuple[int, int]] = [(0, count)] if count > 0 else []

    def next(self) -> slice | None:
        """The part to send now, or None when every message was taken."""
        return slice(*self._parts[-1]) if self._parts else None

    def taken(self) -> None:
        """The namespace took the whole current part."""
        _, self.sent = self._parts.pop()

    def refused(self, sent: int = 0, *, alone: bool = False) -> bool:
        """The namespace refused the current part for size.

        Args:
            sent: how many of the part's messages, from its first, it took before.
            alone: the refusal names one message too large on its own (it fits in no
                part, so splitting cannot help).

        Returns:
            True when the rest of the part was split and sending goes on; False when
            the message at ``self.sent`` is too large, and the plan ends there.
        """
        start, stop = self._parts[-1]
        start += max(0, min(sent, stop - start))
        self.sent = start
        if stop - start == 0:  # it took the whole part after all
            self._parts.pop()
            return True
        if alone or stop - start == 1:
            return False
        self._parts.pop()
        middle = (start + stop) // 2
        self._parts += [(middle, stop), (start, middle)]
        self.splits += 1
        return True


async def send_in_parts(
    send: Callable[[Sequence[Message]], Awaitable[None]],
    messages: Sequence[Message],
    *,
    namespace: str,
) -> None:
    """Send ``messages`` with ``send``; a part the namespace refuses for size goes in halves.

    Args:
        send: sends one part to the namespace (with its retries), all or none.
        messages: the batch, in order.
        namespace: the namespace's name, for the log and the errors.

    Raises:
        MessageTooLarge: one message is over the namespace's limit; ``sent`` of the
            batch, from the first, were taken before it, and nothing after it was sent.
        OperationTimeout: a part failed for a transient reason after earlier parts
            landed (sending the batch again may deliver duplicates).
        TransportError, MessageRejected: as ``send`` raises them, when nothing was sent.
    """
    plan = BatchSplit(len(messages))
    while (part := plan.next()) is not None:
        try:
            await send(messages[part])
        except MessageTooLarge as exc:
            if plan.refused(exc.sent, alone=exc.message_id is not None):
                if plan.splits == 1:
                    logger.info("namespace %s refused a batch of %d messages for size: "
                                "sending it in smaller parts", namespace, len(messages))
                continue
            if plan.sent == 0 and (exc.message_id is not None or len(messages) == 1):
                raise
            raise MessageTooLarge(
                f"{exc} ({plan.sent} of the batch's {len(messages)} messages, from the "
                "first, were sent; the rest were not)",
                sent=plan.sent, message_id=exc.message_id or messages[plan.sent].message_id,
            ) from exc
        except (TransportError, MessageRejected) as exc:
            if plan.sent == 0:
                raise
            if isinstance(exc, MessageRejected):
                raise MessageRejected(f"{exc} (after {plan.sent} of {len(messages)} "
                                      "messages of the batch were sent)") from exc
            raise OperationTimeout(
                f"sending a batch to namespace {namespace!r} failed after {plan.sent} of "
                f"{len(messages)} messages landed: a retry may deliver duplicates ({exc})",
                namespace=exc.namespace) from exc
        plan.taken()
