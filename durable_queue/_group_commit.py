"""Group commit: threads that put at the same time share one transaction.

A commit costs an fsync, about the same for one row as for a hundred. The first
thread to arrive becomes the *leader*: it takes every pending item, writes them
in one transaction and wakes the others. A thread that arrives while a leader is
committing parks its item and waits; when that commit ends, one waiting thread
becomes the next leader and takes everything that queued up meanwhile. A lone
caller is its own leader at once, so it pays one lock round-trip and nothing else.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

__all__ = ["GroupCommitter"]

T = TypeVar("T")
R = TypeVar("R")


class _Ticket(Generic[T, R]):
    __slots__ = ("done", "error", "item", "result")

    def __init__(self, item: T) -> None:
        self.item = item
        self.done = False
        self.result: R | None = None
        self.error: BaseException | None = None

    def outcome(self) -> R:
        if self.error is not None:
            raise self.error
        return self.result  # type: ignore[return-value]


class GroupCommitter(Generic[T, R]):
    """Run ``commit`` over batches of items submitted concurrently.

    Args:
        commit: writes a batch in one transaction and returns, for each item in
            order, its result or the exception to raise in its submitter. If it
            raises, every submitter of that batch gets the exception.
    """

    def __init__(self, commit: Callable[[list[T]], Sequence[R | BaseException]]) -> None:
        self._commit = commit
        # The fast path takes the bare lock (a C-level ``with``); waiting uses a
        # Condition on the same lock. Condition's own ``with`` costs ~0.8 µs here.
        self._mutex = threading.Lock()
        self._cond = threading.Condition(self._mutex)
        self._pending: list[_Ticket[T, R]] = []
        self._leading = False

    def submit(self, item: T) -> R:
        """Commit ``item`` (with whatever else is pending) and return its result.

        Raises:
            BaseException: whatever ``commit`` reported for this item.
        """
        with self._mutex:
            # Alone: nobody commits and nobody waits (a woken waiter may not
            # have taken over yet; then join its batch rather than overtake it).
            alone = not self._leading and not self._pending
            if alone:
                self._leading = True
            else:
                ticket: _Ticket[T, R] = _Ticket(item)
                self._pending.append(ticket)
                while self._leading and not ticket.done:
                    self._cond.wait()
                if ticket.done:
                    return ticket.outcome()
                self._leading = True
                batch, self._pending = self._pending, []
        if alone:
            # The fast path of a lone caller: no ticket, no batch list.
            try:
                outcome = self._commit([item])[0]
            finally:
                self._hand_over()
            if isinstance(outcome, BaseException):
                raise outcome
            return outcome
        self._lead(batch)
        return ticket.outcome()

    def _hand_over(self) -> None:
        with self._mutex:
            self._leading = False
            if self._pending:
                self._cond.notify_all()

    def _lead(self, batch: list[_Ticket[T, R]]) -> None:
        try:
            outcomes = self._commit([t.item for t in batch])
        except BaseException as exc:
            outcomes = [exc] * len(batch)
        with self._mutex:
            for ticket, outcome in zip(batch, outcomes, strict=True):
                if isinstance(outcome, BaseException):
                    ticket.error = outcome
                else:
                    ticket.result = outcome
                ticket.done = True
            self._leading = False
            self._cond.notify_all()
