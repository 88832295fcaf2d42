"""Observability hooks: subclass :class:`GatewayHooks` and override what you need."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import anyio

__all__ = ["GatewayHooks", "dedup_call", "emit"]

T = TypeVar("T")

logger = logging.getLogger("geogateway")


class GatewayHooks:
    """No-op callbacks the gateway calls as things happen.

    Hooks run inline on the gateway's event loop thread, so keep them short. A hook
    that raises is logged and ignored: observability never breaks a send.
    """

    def on_failover(self, *, from_namespace: str, to_namespace: str, at: float) -> None:
        """Sends moved from one namespace to the other (roles swapped)."""

    def on_namespace_down(self, *, namespace: str, error: BaseException) -> None:
        """A namespace failed and is skipped until a probe finds it healthy. A namespace
        that did not answer within its deadline (it hangs) comes with an
        ``OperationTimeout``.

        A receiver also calls it, with a ``MessageRejected`` error, for a namespace
        that refused to be read for good (a wrong key, no such queue): that one is
        not read again, and no ``on_namespace_up`` follows."""

    def on_namespace_up(self, *, namespace: str) -> None:
        """A namespace marked down answered a probe again."""

    def on_buffered(self, *, destination: str, count: int) -> None:
        """``count`` messages went to the durable queue for ``destination``."""

    def on_replayed(self, *, destination: str, count: int, seconds: float) -> None:
        """``count`` buffered messages of ``destination`` were sent."""

    def on_replay_failed(self, *, destination: str, error: BaseException) -> None:
        """Replaying ``destination`` from the durable queue stopped on ``error``: a
        ``DurableQueueError``, ``QueueCorrupt`` for a damaged file, or ``ConfigError``
        when the file holds that destination's messages for other namespaces. After
        the last two, sends that would be buffered behind it raise it too."""

    def on_duplicate(self, *, message_id: str, namespace: str) -> None:
        """A second copy of ``message_id`` was received and settled, not delivered."""

    def on_session_gap(self, *, entity: str, session_id: str, first: int, last: int,
                       waited: float) -> None:
        """A geo session receiver gave up waiting for positions ``first`` to ``last`` of
        a session after ``waited`` seconds, and went on with the next one it had: those
        messages are still in a namespace that is down or in a sender's durable queue,
        or were lost. One that arrives later is handed over late (``on_session_late``)."""

    def on_session_late(self, *, entity: str, session_id: str, position: int,
                        message_id: str) -> None:
        """A message of a gap reported before arrived and was handed over out of order."""

    def on_store_down(self, *, store: str, error: BaseException) -> None:
        """A receiver's de-duplication store or its checkpoint store (e.g. PostgreSQL)
        did not answer: nothing is settled, delivered or checkpointed past it until
        :meth:`on_store_up` (``store`` names the server, never a password). Once per
        outage."""

    def on_store_up(self, *, store: str) -> None:
        """The store reported by :meth:`on_store_down` answers again."""

    def on_dedup_fallback(self, *, store: str, fallback: str, active: bool) -> None:
        """``active``: the shared dedup store stayed unreachable and this receiver now
        de-duplicates against its local window ``fallback`` (at-least-once across
        machines); not ``active``: it is back on ``store``."""

    def on_sent(
        self,
        *,
        entity: str,
        count: int,
        namespaces: tuple[str, ...],
        buffered: tuple[str, ...],
        failed_over: bool,
        seconds: float,
        error: BaseException | None,
    ) -> None:
        """A ``send`` or ``send_batch`` of ``count`` messages to ``entity`` returned
        (``error`` None) or raised ``error``, after ``seconds``. ``namespaces`` took
        the messages; ``buffered``: the durable queue destinations they were written
        to; ``failed_over``: the roles swapped during this send."""

    def on_backlog(self, *, destination: str, count: int, oldest_enqueued_at: float | None
                   ) -> None:
        """The durable queue holds ``count`` messages for ``destination``, the oldest
        put at ``oldest_enqueued_at`` (Unix time; None when it holds none), as the
        sender knows it: when it first looks at the queue (a backlog left by an
        earlier run), after each batch buffered, and as a replay drains it."""

    def on_dedup_store(self, *, operation: str, count: int, seconds: float) -> None:
        """One call to the de-duplication store took ``seconds``: ``operation`` is
        ``"check"`` (verdicts for ``count`` ids), ``"done"`` (``count`` ids marked
        done) or ``"release"`` (a claim given back)."""

    def on_partition_progress(
        self,
        *,
        namespace: str,
        entity: str,
        consumer_group: str,
        partition_id: str,
        owned: bool,
        lag_events: int,
        oldest_unsaved_at: float | None,
    ) -> None:
        """A partition this instance reads on ``namespace``: claimed or read further
        (``owned``), or handed over or lost (``owned`` False). ``lag_events``: events
        read past its last checkpoint (a new owner would read them again);
        ``oldest_unsaved_at``: the enqueued time (Unix) of the oldest of them, None
        when there are none."""

    def on_relay_request(self, *, namespace: str, method: str, status: int | None,
                         outcome: str) -> None:
        """One attempt of a relay request on ``namespace`` ended: ``status`` is the HTTP
        status the relay or the listener answered (None: no answer), ``outcome`` one
        of ``"answered"``, ``"unavailable"``, ``"rejected"``, ``"unknown"`` (no
        answer, the outcome unknown) or ``"error"``."""


def emit(hooks: Sequence[GatewayHooks], name: str, **kwargs: Any) -> None:
    """Call hook ``name`` on each of ``hooks``; log and carry on when one raises."""
    for hook in hooks:
        try:
            getattr(hook, name)(**kwargs)
        except Exception:
            logger.exception("hook %s.%s failed", type(hook).__name__, name)


async def dedup_call(hooks: Sequence[GatewayHooks], operation: str, count: int,
                     call: Callable[..., T], *args: Any,
                     limiter: anyio.CapacityLimiter | None = None) -> T:
    """Run a de-duplication store ``call`` in a worker thread (its SQLite work never
    runs on the event loop) under ``limiter`` (default: anyio's); with hooks, time it
    there and report it on the loop (``on_dedup_store``)."""
    import anyio.to_thread  # here: a module that only subclasses the hooks needs no anyio

    if not hooks:
        return await anyio.to_thread.run_sync(call, *args, limiter=limiter)
    result, seconds = await anyio.to_thread.run_sync(_timed, call, args, limiter=limiter)
    emit(hooks, "on_dedup_store", operation=operation, count=count, seconds=seconds)
    return result


def _timed(call: Callable[..., T], args: tuple[Any, ...]) -> tuple[T, float]:
    began = time.perf_counter()
    result = call(*args)
    return result, time.perf_counter() - began
