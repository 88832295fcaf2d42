"""The records and the store seam of the de-duplicator (see :mod:`replication._dedup`)."""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from replication._errors import ConfigError

__all__ = [
    "DEFAULT_DEDUP_WINDOW",
    "DedupStats",
    "DedupStore",
    "DedupWindow",
    "TransactionalDedupStore",
    "Verdict",
]


class Verdict(enum.Enum):
    """What to do with one received copy of a message."""

    DELIVER = "deliver"
    DUPLICATE = "duplicate"
    HOLD = "hold"


@dataclass(frozen=True, kw_only=True)
class DedupWindow:
    """How long, and for how many ids, a done ``MessageId`` is remembered.

    Defaults follow the brokers' duplicate detection (10 minutes; Service Bus allows
    up to 7 days). Both bounds apply: an id leaves the window when it is older than
    ``seconds`` or when ``count`` newer ids were done after it.

    Raises:
        ConfigError: a bound is not a positive number.
    """

    seconds: float = 600.0
    count: int = 1_000_000

    def __post_init__(self) -> None:
        if isinstance(self.seconds, bool) or not isinstance(self.seconds, (int, float)):
            raise ConfigError(f"DedupWindow.seconds must be a number, not {self.seconds!r}")
        if not self.seconds > 0 or self.seconds == float("inf"):
            raise ConfigError(f"DedupWindow.seconds must be > 0 and finite, not {self.seconds}")
        if isinstance(self.count, bool) or not isinstance(self.count, int):
            raise ConfigError(f"DedupWindow.count must be an int, not {self.count!r}")
        if self.count <= 0:
            raise ConfigError(f"DedupWindow.count must be > 0, not {self.count}")


DEFAULT_DEDUP_WINDOW = DedupWindow()
"""The de-duplication window by default: 10 minutes and 1,000,000 ids."""


@dataclass(frozen=True, kw_only=True)
class DedupStats:
    """Counters of one :class:`Deduplicator` since it was created.

    ``window_size`` is the number of ids in this process's in-memory front, not the
    shared store's row count (which would cost a disk read).
    """

    checks: int
    delivered: int
    duplicates: int
    held: int
    window_size: int


@runtime_checkable
class DedupStore(Protocol):
    """The seam between the de-duplication policy and its (shared) state.

    Required: :meth:`claim`, :meth:`finish`, :meth:`peek`, :meth:`prune`,
    :meth:`close` and the ``window`` attribute. :meth:`finish_many` has a default
    that loops over :meth:`finish`; stores that can do it in one round trip override it.

    Runtime-checkable, so a receiver can tell a store from a path with ``isinstance``.
    The store owns the authoritative window: ``claim`` and ``peek`` treat an id done
    at or before ``now - window.seconds`` as not done, whether or not it was pruned.
    """

    window: DedupWindow

    def claim(
        self, message_ids: Sequence[str], *, owner: str, now: float, lease: float
    ) -> list[Verdict]:
        """Claim each id for ``owner`` until ``now + lease``, atomically per id.

        Per id, in order: done within the window -> ``DUPLICATE``; claimed by another
        owner (or earlier in the same batch) with an unexpired lease -> ``HOLD``;
        otherwise the id is claimed -> ``DELIVER``. An unexpired claim of ``owner``'s
        own is claimed again (``DELIVER``, the lease renewed): it is one whose answer
        ``owner`` never got (the connection broke after the commit), since a
        :class:`Deduplicator` never asks again for an id it holds.
        """
        raise NotImplementedError  # pragma: no cover

    def finish(self, message_id: str, *, owner: str, succeeded: bool, now: float) -> None:
        """End ``owner``'s claim: on success record the id as done at ``now``
        (whoever holds the claim: the work was done); on failure release the claim
        if ``owner`` still holds it, so that the other copy may be delivered."""
        raise NotImplementedError  # pragma: no cover

    def peek(self, message_id: str, *, now: float) -> Verdict:
        """What :meth:`claim` would answer for ``message_id``, without claiming."""
        raise NotImplementedError  # pragma: no cover

    def prune(self, *, now: float, window: DedupWindow) -> int:
        """Drop done ids outside ``window`` and expired claims; return how many rows went."""
        raise NotImplementedError  # pragma: no cover

    def close(self) -> None:
        """Release the store's resources; the store is unusable afterwards."""
        raise NotImplementedError  # pragma: no cover

    def finish_many(
        self, message_ids: Sequence[str], *, owner: str, succeeded: bool, now: float
    ) -> None:
        """:meth:`finish` for several ids (one round trip where the store can)."""
        for message_id in message_ids:
            self.finish(message_id, owner=owner, succeeded=succeeded, now=now)


@runtime_checkable
class TransactionalDedupStore(Protocol):
    """An optional extension of :class:`DedupStore`: the transactional inbox.

    A store that also keeps the application's data (e.g. one SQLite file) can run the
    handler's writes and the "done" mark of a ``MessageId`` in one transaction, so
    that a crash leaves either both or neither: the effect happens exactly once.
    :meth:`replication.Deduplicator.succeeded_with` uses it.
    """

    def finish_with_effect(
        self, message_id: str, *, owner: str, now: float, effect: Callable[[Any], None]
    ) -> bool:
        """In one transaction: unless ``message_id`` is already done within the window,
        call ``effect(handle)`` (``handle`` is the store's own transactional handle,
        e.g. a ``sqlite3.Connection``), record the id as done at ``now`` and end
        ``owner``'s claim. If ``effect`` raises, nothing of it and no mark is kept.

        Returns:
            True when the effect ran and was committed with the mark; False when the
            id was already done (another copy's effect committed first) and the
            effect was not run.
        """
        raise NotImplementedError  # pragma: no cover
