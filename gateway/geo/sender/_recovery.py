"""The sender's recovery round: probe what is down, replay what can go, fail back."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import MappingProxyType

from gateway.geo._hooks import GatewayHooks, emit
from gateway.geo._tracing import MessageTracer
from gateway.geo.sender._buffering import Buffer
from gateway.geo.sender._namespaces import NamespacePair
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

__all__ = ["Recovery", "ReplayReport"]

logger = logging.getLogger("geogateway")


class ReplayReport(int):
    """What one ``replay()`` did: it *is* the number of messages sent (an ``int``, as
    ``replay()`` always returned), and it says what still waits and why.

    Attributes:
        waiting: messages still waiting after the replay, per durable queue
            destination of the sender's entity (only those with some).
        reasons: why, for each destination in ``waiting``: a namespace is down,
            a send failed, another replayer holds the destination, ...
    """

    waiting: Mapping[str, int]
    reasons: Mapping[str, str]

    def __new__(
        cls,
        sent: int,
        *,
        waiting: Mapping[str, int] | None = None,
        reasons: Mapping[str, str] | None = None,
    ) -> ReplayReport:
        report = super().__new__(cls, sent)
        report.waiting = MappingProxyType(dict(waiting or {}))
        report.reasons = MappingProxyType(dict(reasons or {}))
        return report

    @property
    def sent(self) -> int:
        """How many buffered messages were sent."""
        return int(self)

    @property
    def still_waiting(self) -> int:
        """How many messages still wait, over all destinations."""
        return sum(self.waiting.values())

    def __str__(self) -> str:
        return str(int(self))

    def __repr__(self) -> str:
        return (f"ReplayReport(sent={int(self)}, waiting={dict(self.waiting)}, "
                f"reasons={dict(self.reasons)})")


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
        tracer: MessageTracer | None = None,
        system: str = "",
    ) -> None:
        self._namespaces = namespaces
        self._buffer = buffer
        self._failback = failback
        self._hooks = hooks
        self._tracer = tracer
        self._system = system
        # Made on first use, on the event loop the sender runs on.
        self._lock: asyncio.Lock | None = None
        # The last error reading which destinations hold messages, logged once.
        self._refresh_error: str | None = None

    async def round(
        self, progress: Callable[[str, int], None] | None = None, *, raise_errors: bool = False
    ) -> ReplayReport:
        """Run one round; report how many buffered messages were sent, and why any
        still wait.

        Args:
            progress: called as ``progress(destination, replayed_so_far)``.
            raise_errors: a ``replay()`` call: raise a replay's queue or ownership
                error (after reporting it), retry destinations an earlier round found
                broken, and count what still waits (a background round does not).
        """
        if self._lock is None:
            self._lock = asyncio.Lock()
        pair, buffer = self._namespaces, self._buffer
        async with self._lock:
            # Messages another process put in the file after this sender started
            # would otherwise be missed (replay() returned 0 while they waited).
            try:
                await buffer.refresh()
                await buffer.report_backlog()
            except DurableQueueError as exc:
                if raise_errors:
                    raise
                self._refresh_failed(exc)
            else:
                self._refresh_error = None
            await pair.role_keeper.sync()  # what other senders changed, or a missed write
            await pair.probe_down()
            replayed = 0
            pending = sorted(buffer.pending)
            ready = replayable(pending, namespaces=pair.transports, down=pair.down)
            reasons = {d: self._why_not_ready(d) for d in pending if d not in ready}
            for dest in ready:
                if dest in buffer.broken and not raise_errors:
                    # Reported once; only an explicit replay() tries again.
                    reasons[dest] = f"its replay failed: {buffer.broken[dest]}"
                    continue
                try:
                    sent, why = await self._replay(dest, progress)
                except (DurableQueueError, ConfigError) as exc:
                    self._replay_failed(dest, exc, raised=raise_errors)
                    if raise_errors:
                        raise
                else:
                    buffer.broken.pop(dest, None)
                    replayed += sent
                    if why:
                        reasons[dest] = why
            if should_fail_back(failback=self._failback, roles=pair.roles, down=pair.down):
                await pair.fail_back()
            if not raise_errors:
                return ReplayReport(replayed)  # nobody reads it: not worth the counts
            waiting = await buffer.waiting(sorted({*pending, *buffer.pending}))
            return ReplayReport(replayed, waiting=waiting, reasons={
                d: reasons.get(d) or "more messages were buffered for it while it was "
                "replayed: replay again" for d in waiting})

    def _traced(self, send: Callable[[Sequence[Message]], Awaitable[None]]
                ) -> Callable[[Sequence[Message]], Awaitable[None]]:
        # Each replayed batch is a send span of its own, linked to the messages' own
        # trace context (the one their first send gave them, kept in the queue).
        tracer, entity = self._tracer, self._namespaces.entity
        assert tracer is not None

        async def traced(batch: Sequence[Message]) -> None:
            with tracer.send(system=self._system, entity=entity, messages=batch,
                             replay=True) as trace:
                await send(trace.messages)
                trace.finished(namespaces=(), buffered=(), failed_over=False, hedged=False)

        return traced

    def _refresh_failed(self, error: DurableQueueError) -> None:
        # Each background round would meet it again: one line, until it changes.
        if str(error) != self._refresh_error:
            self._refresh_error = str(error)
            logger.error("cannot read which destinations hold messages: %s", error)

    def _why_not_ready(self, dest: str) -> str:
        namespace, _ = parse_destination(dest)
        if namespace == ANY_NAMESPACE:
            down = " and ".join(sorted(self._namespaces.down))
            return f"no namespace is up ({down}: their probes failed)"
        return f"namespace {namespace} is down (its probe failed)"

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
    ) -> tuple[int, str]:
        """Drain ``dest``; return how many were sent and why it stopped early ("")."""
        pair = self._namespaces
        namespace, _ = parse_destination(dest)
        if namespace == ANY_NAMESPACE:
            # Buffered while both were down: to whichever takes it, active first.
            async def send(batch: Sequence[Message]) -> None:
                roles = pair.roles
                order = [ns for ns in roles.order if ns not in pair.down]
                sent = await pair.send_hedged(batch, order, mode=Mode.PASSIVE,
                                              planned=roles)
                if sent.accepted:
                    return
                if sent.outcome.permanent is not None:
                    raise sent.outcome.permanent
                raise sent.outcome.last_error or NamespaceUnavailable(
                    "no namespace is up", namespace=ANY_NAMESPACE
                )
        else:
            async def send(batch: Sequence[Message]) -> None:
                await pair.send_within(namespace, batch)
        report = None if progress is None else functools.partial(progress, dest)
        replayed, seconds, stopped_by = await self._buffer.drain(
            dest, send if self._tracer is None else self._traced(send), report)
        why = ""
        if isinstance(stopped_by, TransportError) and namespace == ANY_NAMESPACE:
            why = f"no namespace took them (the last error: {stopped_by})"
        elif isinstance(stopped_by, TransportError):
            pair.mark_down(namespace, stopped_by)
            why = (f"sending to {namespace} failed ({stopped_by}); it is skipped until a "
                   f"probe finds it back")
        elif stopped_by is not None:
            why = str(stopped_by)
        if replayed:
            emit(self._hooks, "on_replayed", destination=dest, count=replayed, seconds=seconds)
        return replayed, why
