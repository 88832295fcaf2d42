"""The hedged-send driver: runs one send's attempts as ``replication.next_hedge_step`` says.

Each attempt is a task sending the batch to one namespace (with that namespace's
retries). The driver waits until an attempt finishes or the next deadline passes, and
asks the pure step function what to do next: start another attempt (a failover, or a
hedge when the earlier one has not answered in time), wait, or stop. An attempt past
its deadline is given the time the namespace spent answering the attempts started
before it (``replication.SendProgress``): queued behind them (a transport sends one
batch at a time), it is not overdue while they land. An attempt still running when
the send is over is never cancelled (its outcome is unknown: it may still land, and
the receivers remove the second copy); the namespace pair keeps it until it ends,
logs how it ended, and cancels it only when the sender closes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from replication import (
    Attempt,
    AttemptState,
    DeadlineEstimator,
    GatewayError,
    Message,
    MessageRejected,
    Mode,
    Operation,
    OperationTimeout,
    SendProgress,
    TransportError,
    next_hedge_step,
)

__all__ = ["HedgeOutcome", "batch_bytes", "run_attempts"]


@dataclass(frozen=True)
class HedgeOutcome:
    """How one send's attempts ended.

    ``accepted``: namespaces that took the batch (passive: at most one). ``overdue``:
    namespaces that had not answered within their deadline (their attempt goes on;
    the outcome is unknown), with the ``OperationTimeout`` that says so in ``errors``.
    ``errors``: the error of each namespace that failed or is overdue. ``hedged``: a
    namespace was sent the batch because the one before it had not answered in time.
    ``late``: the attempts still running, for their owner to keep.
    """

    accepted: tuple[str, ...]
    overdue: tuple[str, ...]
    errors: dict[str, GatewayError]
    hedged: bool
    late: dict[str, asyncio.Task[None]] = field(default_factory=dict)

    @property
    def rejected(self) -> MessageRejected | None:
        """The first permanent refusal, if a namespace refused the batch for good."""
        return next((e for e in self.errors.values() if isinstance(e, MessageRejected)), None)

    @property
    def permanent(self) -> GatewayError | None:
        """The first error that neither a retry nor the other namespace mends: a
        refusal (``MessageRejected``) first, else any gateway error that is not a
        ``TransportError`` (a ``ConfigError`` ...). The sender raises it as it raises a
        refusal: never buffered (that would file it under "no namespace is up")."""
        return self.rejected or next(
            (e for e in self.errors.values() if not isinstance(e, TransportError)), None)

    @property
    def last_error(self) -> TransportError | None:
        """The last transient error (an overdue namespace's ``OperationTimeout`` too)."""
        found = [e for e in self.errors.values() if isinstance(e, TransportError)]
        return found[-1] if found else None


def batch_bytes(batch: Sequence[Message]) -> int:
    """The bytes of a batch's bodies, for the deadline's size allowance."""
    return sum(len(m.body) for m in batch)


def _overdue_error(namespace: str, entity: str, seconds: float) -> OperationTimeout:
    return OperationTimeout(
        f"send to {entity!r} on namespace {namespace!r} got no answer within its deadline "
        f"of {seconds:.3g} s: the outcome is unknown (it may still land; receivers remove "
        "the second copy)", namespace=namespace)


class _Waiter:
    """Wakes the driver as soon as an attempt ends or a deadline passes.

    The attempts call :meth:`wake` themselves as they end, inside their own last step,
    so that the driver resumes one loop iteration after an attempt ended (a done
    callback would cost one more): a send pays for this wait every time.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._future: asyncio.Future[None] | None = None

    def wake(self) -> None:
        future = self._future
        if future is not None and not future.done():
            future.set_result(None)

    async def wait(self, tasks: list[asyncio.Task[None]],
                   timeout: float | None) -> list[asyncio.Task[None]]:
        """The tasks done once one of them is, or ``timeout`` seconds passed."""
        done = [t for t in tasks if t.done()]
        if done:
            return done
        self._future = self._loop.create_future()
        timer = None if timeout is None else self._loop.call_later(timeout, self.wake)
        try:
            await self._future
        finally:
            self._future = None
            if timer is not None:
                timer.cancel()
        # An attempt wakes us in its last step, so it is a done task by now.
        return [t for t in tasks if t.done()]

    async def run(self, attempt: Coroutine[Any, Any, None]) -> None:
        """Await ``attempt`` (as a task's coroutine), then wake the driver."""
        try:
            await attempt
        finally:
            self.wake()


def _error_of(task: asyncio.Task[None], namespace: str, entity: str) -> GatewayError | None:
    """The gateway error a finished attempt raised (None: it succeeded).

    Raises:
        BaseException: anything but a ``GatewayError`` (a bug), as it was.
    """
    if task.cancelled():  # not by us: an SDK that turned a timeout into a cancel
        return OperationTimeout(f"send to {entity!r} on namespace {namespace!r} was "
                                "cancelled: the outcome is unknown", namespace=namespace)
    error = task.exception()
    if error is None or isinstance(error, GatewayError):
        return error
    raise error


async def _answered(attempt: Coroutine[Any, Any, None], progress: SendProgress, ns: str,
                    ticket: int, clock: Callable[[], float]) -> None:
    # Said as it lands, even after its send is over: the attempts queued behind it
    # count their deadline from here.
    await attempt
    progress.answered(ns, ticket=ticket, at=clock())


def _move_dues(attempts: dict[str, Attempt], progress: SendProgress,
               launched: dict[str, tuple[int, float]], deadlines: dict[str, float],
               now: float) -> None:
    # An attempt past its due may have been queued behind attempts (of other sends) that
    # the namespace has been answering since: its deadline counts from the last of them.
    for ns, attempt in attempts.items():
        if attempt.overdue(now):
            ticket, at = launched[ns]
            due = progress.due(ns, ticket=ticket, launched=at, deadline=deadlines[ns])
            if due > attempt.due:
                attempts[ns] = replace(attempt, due=due)


def _bound_unmeasured(attempts: dict[str, Attempt], launched: dict[str, tuple[int, float]],
                      deadlines: dict[str, float], estimator: DeadlineEstimator,
                      now: float) -> bool:
    """Once one namespace took an active send: an attempt on a namespace whose latency is
    not known yet (its deadline is the policy's ``initial``, made for opening a
    connection) may take at most ``max(ceiling, 2 x the time the first one took)`` from
    its start.

    A sender started while a namespace hangs would otherwise hold its first sends for
    the whole ``initial`` (2 s) although the other namespace took them at once; a
    namespace up to twice as slow to open as the other still makes it. True once a
    namespace took the send (the bound is set once)."""
    took = [now - launched[ns][1] for ns, a in attempts.items()
            if a.state is AttemptState.SUCCEEDED]
    if not took:
        return False
    room = max(estimator.policy.ceiling, 2 * min(took))
    for ns, attempt in attempts.items():
        if (attempt.state is AttemptState.RUNNING
                and estimator.samples(ns, Operation.SEND) == 0):
            deadline = min(deadlines[ns], room)
            attempts[ns] = replace(attempt, due=launched[ns][1] + deadline)
            deadlines[ns] = deadline  # what _move_dues counts from
    return True


async def run_attempts(
    order: Sequence[str],
    send: Callable[[str], Coroutine[Any, Any, None]],
    *,
    mode: Mode,
    estimator: DeadlineEstimator,
    progress: SendProgress,
    entity: str,
    size: int,
) -> HedgeOutcome:
    """Send one batch to the namespaces of ``order`` as the hedging policy says.

    Args:
        order: namespaces to try, in order (passive) or all at once (active).
        send: sends the batch to one namespace (with its retries), raising its error.
        mode: passive (fail over, hedge) or active (all at once).
        estimator: each namespace's send deadline.
        progress: the namespaces' answers to attempts (on ``estimator.clock``): an
            attempt's deadline counts from the last answer to one started before it.
        entity: for the messages of the errors.
        size: bytes of the batch, for the deadline's size allowance.

    Raises:
        Exception: anything but a ``GatewayError`` an attempt raised (a bug).
    """
    clock = estimator.clock
    loop = asyncio.get_running_loop()
    attempts: dict[str, Attempt] = {}
    tasks: dict[asyncio.Task[None], str] = {}
    deadlines: dict[str, float] = {}
    launched: dict[str, tuple[int, float]] = {}  # each attempt's ticket and launch
    errors: dict[str, GatewayError] = {}
    hedged = refused = bounded = False
    waiter = _Waiter(loop)
    try:
        step = next_hedge_step(order, attempts, now=clock(), mode=mode)
        while not step.done:
            if refused and step.launch:
                break  # refused for good: never sent on to the other namespace
            wake_at = step.wake_at
            if step.launch:
                hedged = hedged or step.hedge
                for ns in step.launch:
                    deadlines[ns] = estimator.deadline(ns, Operation.SEND, size=size)
                    ticket, at = progress.ticket(), clock()
                    launched[ns] = (ticket, at)
                    attempts[ns] = Attempt(ns, due=at + deadlines[ns])
                    answer = _answered(send(ns), progress, ns, ticket, clock)
                    tasks[loop.create_task(waiter.run(answer))] = ns
                # What follows a launch: wait for the first deadline of those just started.
                wake_at = min(attempts[ns].due for ns in step.launch)
            running = [t for t, ns in tasks.items()
                       if attempts[ns].state is AttemptState.RUNNING]
            wait = None if wake_at is None else max(0.0, wake_at - clock())
            for task in await waiter.wait(running, wait):
                ns = tasks[task]
                error = _error_of(task, ns, entity)
                state = AttemptState.SUCCEEDED if error is None else AttemptState.FAILED
                attempts[ns] = Attempt(ns, due=attempts[ns].due, state=state)
                if error is not None:
                    errors[ns] = error
                    # A passive send refused for good (or failing for good: any
                    # error but a transient one) goes nowhere else (the other
                    # namespace would refuse it too); a hedge already on its way is
                    # still waited for, within its deadline.
                    refused = refused or (not isinstance(error, TransportError)
                                          and mode is Mode.PASSIVE)
            now = clock()
            _move_dues(attempts, progress, launched, deadlines, now)
            if mode is Mode.ACTIVE and not bounded:
                bounded = _bound_unmeasured(attempts, launched, deadlines, estimator, now)
            step = next_hedge_step(order, attempts, now=now, mode=mode)
    except BaseException:
        # The caller was cancelled (or a bug): the attempts go with it, as a plain
        # send would have.
        for task, ns in tasks.items():
            if attempts[ns].state is AttemptState.RUNNING:
                task.cancel()
        raise
    if not step.done:  # ended by a refusal: nothing took the batch
        now = clock()
        step = replace(step, done=True, launch=(), accepted=(), overdue=tuple(
            ns for ns in order if ns in attempts and attempts[ns].overdue(now)))
    for ns in step.overdue:
        errors[ns] = _overdue_error(ns, entity, deadlines[ns])
    late = {ns: t for t, ns in tasks.items() if attempts[ns].state is AttemptState.RUNNING}
    return HedgeOutcome(accepted=step.accepted, overdue=step.overdue, errors=errors,
                        hedged=hedged, late=late)
