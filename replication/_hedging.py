"""Hedged sends, decided without I/O: when to send to the other namespace, when a send
is over, and who took it.

The sender driver starts the attempts this module says to start, waits until one of
them finishes or the next deadline passes, and asks again (the shape of tenacity's
``iter()``). An attempt that passes its deadline is never cancelled: its outcome is
unknown, it may still land, and the receive side removes the copy that arrives twice.

- **Passive**: try the namespaces in order. The next one is started when every attempt
  started so far failed (a failover) or is past its deadline (a *hedge*: the same batch,
  same ``MessageId`` s, to the other namespace). The first success wins. When none is
  left to start and none is within its deadline, the send is over with no winner.
- **Active**: start all at once; the send is over when each has finished or passed its
  deadline. Those that took it are the winners; a copy past its deadline is the caller's
  to buffer for that namespace.

A busy namespace is not a hung one: a send may wait behind the sends begun before it
(a transport sends one batch at a time per entity), and that wait is not the
namespace's slowness. :class:`SendProgress` moves an attempt's deadline on each time a
send begun before it is answered, so the deadline counts from the namespace's last
progress on the sends ahead of it: from when the namespace could start on this one. A
hung namespace answers none of them, and its attempts pass their deadline as before.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from replication._policy import Mode

__all__ = ["Attempt", "AttemptState", "HedgeStep", "SendProgress", "next_hedge_step"]


class AttemptState(enum.Enum):
    """Where one attempt to send a batch to one namespace stands."""

    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


_RUNNING, _SUCCEEDED = AttemptState.RUNNING, AttemptState.SUCCEEDED


@dataclass(frozen=True)
class Attempt:
    """One namespace's attempt: its state, and the clock reading by which it should
    have answered (its start plus its deadline)."""

    namespace: str
    due: float
    state: AttemptState = AttemptState.RUNNING

    def overdue(self, now: float) -> bool:
        """Still running at or after its deadline."""
        return self.state is _RUNNING and now >= self.due


@dataclass(frozen=True)
class HedgeStep:
    """What the driver does next.

    ``launch``: namespaces to start an attempt on now; ``hedge`` says they are started
    because earlier attempts are past their deadline (not because they failed).
    ``wake_at``: look again at this clock reading, unless an attempt finishes first.
    ``done``: the send is over; ``accepted`` took it (passive: at most one), and
    ``overdue`` are still running past their deadline (outcome unknown).
    """

    launch: tuple[str, ...] = ()
    hedge: bool = False
    wake_at: float | None = None
    done: bool = False
    accepted: tuple[str, ...] = ()
    overdue: tuple[str, ...] = ()


def next_hedge_step(order: Sequence[str], attempts: Mapping[str, Attempt], *, now: float,
                    mode: Mode) -> HedgeStep:
    """Decide the next step of one send.

    Args:
        order: the namespaces to try, in order (``replication.plan_send``'s ``attempt``).
        attempts: the attempts started so far, by namespace.
        now: the clock reading the attempts' ``due`` are on.
        mode: passive (fail over, hedge) or active (all at once).
    """
    # One pass (a send pays for this call twice): what is running within its deadline
    # (the earliest such deadline), running past it, done, and not started yet.
    wake_at: float | None = None
    overdue: list[str] = []
    accepted: list[str] = []
    unstarted: list[str] = []
    for ns in order:
        attempt = attempts.get(ns)
        if attempt is None:
            unstarted.append(ns)
        elif attempt.state is _RUNNING:
            if now >= attempt.due:
                overdue.append(ns)
            elif wake_at is None or attempt.due < wake_at:
                wake_at = attempt.due
        elif attempt.state is _SUCCEEDED:
            accepted.append(ns)
    if mode is Mode.ACTIVE:
        if unstarted:
            return HedgeStep(launch=tuple(unstarted))
        if wake_at is not None:
            return HedgeStep(wake_at=wake_at)
        return HedgeStep(done=True, accepted=tuple(accepted), overdue=tuple(overdue))
    if accepted:
        return HedgeStep(done=True, accepted=(accepted[0],), overdue=tuple(overdue))
    if unstarted and wake_at is None:
        return HedgeStep(launch=(unstarted[0],), hedge=bool(overdue))
    if wake_at is not None:
        return HedgeStep(wake_at=wake_at)
    return HedgeStep(done=True, overdue=tuple(overdue))


class SendProgress:
    """The recent answers of each namespace to send attempts, by ticket: an attempt
    takes a ticket as it starts (tickets count up), and is answered at a clock reading
    (the clock of the attempts' ``due``).

    Args:
        keep: how many recent answers are kept per namespace (the attempts one may be
            queued behind are the recent ones).
    """

    def __init__(self, keep: int = 256) -> None:
        self._keep = keep
        self._tickets = 0
        self._answers: dict[str, deque[tuple[int, float]]] = {}

    def ticket(self) -> int:
        """A new attempt's ticket: greater than every ticket taken before it."""
        self._tickets += 1
        return self._tickets

    def answered(self, namespace: str, *, ticket: int, at: float) -> None:
        """The attempt of ``ticket`` was answered by ``namespace`` (it took the batch)
        at ``at``."""
        answers = self._answers.get(namespace)
        if answers is None:
            answers = self._answers[namespace] = deque(maxlen=self._keep)
        answers.append((ticket, at))

    def due(self, namespace: str, *, ticket: int, launched: float, deadline: float) -> float:
        """When the attempt of ``ticket``, launched at ``launched`` with ``deadline``
        seconds, is due: ``deadline`` after the later of its launch and the last answer
        of ``namespace`` to an attempt started before it (those it may have waited for)."""
        start = launched
        for earlier, at in self._answers.get(namespace, ()):
            if earlier < ticket and at > start:
                start = at
        return start + deadline
