"""The sender's recovery round: probe what is down, replay what can go, fail back."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Sequence

from gateway.geo._buffering import Buffer
from gateway.geo._hooks import GatewayHooks, emit
from gateway.geo._namespaces import NamespacePair
from replication import (
    ANY_NAMESPACE,
    ConfigError,
    DurableQueueError,
    Message,
    Mode,
    NamespaceUnavailable,
    QueueCorrupt,
    TransportError,
    parse_destination,
    replayable,
    should_fail_back,
)

__all__ = ["Recovery"]

logger = logging.getLogger("geogateway")


class Recovery:
    """Recovery rounds of one sender, one at a time.

    A round probes the namespaces marked down, replays the durable queue's
    destinations whose namespaces are up (``replication.replayable``), and fails
    back to the primary when the policy says so (``replication.should_fail_back``).
    The background task and explicit ``replay()`` calls share it: two rounds at
    once would drain the same destination twice.
    """

    def __init__(
        self,
        namespaces: NamespacePair,
        buffer: Buffer,
        *,
        failback: bool,
        hooks: Sequence[GatewayHooks],
    ) -> None:
        self._namespaces = namespaces
        self._buffer = buffer
        self._failback = failback
        self._hooks = hooks
        # Made on first use, on the event loop the sender runs on.
        self._lock: asyncio.Lock | None = None

    async def round(
        self, progress: Callable[[str, int], None] | None = None, *, raise_errors: bool = False
    ) -> int:
        """Run one round; return how many buffered messages were sent.

        Args:
            progress: called as ``progress(destination, replayed_so_far)``.
            raise_errors: raise a replay's queue or ownership error (after reporting
                it), and retry destinations an earlier round found broken.
        """
        if self._lock is None:
            self._lock = asyncio.Lock()
        pair, buffer = self._namespaces, self._buffer
        async with self._lock:
            await pair.probe_down()
            replayed = 0
            ready = replayable(sorted(buffer.pending), namespaces=pair.transports,
                               down=pair.down)
            for dest in ready:
                if dest in buffer.broken and not raise_errors:
                    continue  # reported once; only an explicit replay() tries again
                try:
                    replayed += await self._replay(dest, progress)
                except (DurableQueueError, ConfigError) as exc:
                    self._replay_failed(dest, exc, raised=raise_errors)
                    if raise_errors:
                        raise
                else:
                    buffer.broken.pop(dest, None)
            if should_fail_back(failback=self._failback, roles=pair.roles, down=pair.down):
                pair.fail_back()
            return replayed

    def _replay_failed(
        self, dest: str, error: DurableQueueError | ConfigError, *, raised: bool
    ) -> None:
        if isinstance(error, (QueueCorrupt, ConfigError)):
            self._buffer.broken[dest] = error
        # In the background nobody else hears of it: an error line. A replay() call
        # raises it to its caller as well, so the log line is a warning there.
        level = logging.WARNING if raised else logging.ERROR
        logger.log(level, "replay of %s stopped: %s", dest, error)
        emit(self._hooks, "on_replay_failed", destination=dest, error=error)

    async def _replay(
        self, dest: str, progress: Callable[[str, int], None] | None = None
    ) -> int:
        pair = self._namespaces
        namespace, _ = parse_destination(dest)
        if namespace == ANY_NAMESPACE:
            # Buffered while both were down: to whichever takes it, active first.
            async def send(batch: Sequence[Message]) -> None:
                order = [ns for ns in pair.roles.order if ns not in pair.down]
                sent = await pair.send_hedged(batch, order, mode=Mode.PASSIVE)
                if sent.accepted:
                    return
                if sent.outcome.rejected is not None:
                    raise sent.outcome.rejected
                raise sent.outcome.last_error or NamespaceUnavailable(
                    "no namespace is up", namespace=ANY_NAMESPACE
                )
        else:
            async def send(batch: Sequence[Message]) -> None:
                await pair.send_within(namespace, batch)
        report = None if progress is None else functools.partial(progress, dest)
        replayed, seconds, stopped_by = await self._buffer.drain(dest, send, report)
        if isinstance(stopped_by, TransportError) and namespace != ANY_NAMESPACE:
            pair.mark_down(namespace, stopped_by)
        if replayed:
            emit(self._hooks, "on_replayed", destination=dest, count=replayed, seconds=seconds)
        return replayed
