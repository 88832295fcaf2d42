"""A session's order across namespaces: positions, and the per-session reorder buffer.

The geo sender stamps each message of a session with its position in that session
(the application property :data:`SESSION_POSITION`: 0, 1, 2, ... in the order the
application sent them). Copies of one session's messages may land in either namespace,
or both (passive failover mid-session, active duplicates, a replay of the durable
queue after an outage), so each namespace alone may hand them out of the sender's
order. A geo session receiver puts what it receives from both into a
:class:`ReorderBuffer` and hands the handler only the message whose turn it is.

A position that does not come (its message is still in a namespace that is down, or
in a sender's durable queue, or was lost) is a *gap*: after ``gap_timeout`` seconds
the buffer gives up on it, reports a :class:`SessionGap` and goes on with the lowest
position it holds. A message of a reported gap that arrives later is *late*: it can
no longer be handed over in order.

Pure: no I/O, time comes in as ``now`` arguments.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["SESSION_POSITION", "ReorderBuffer", "SessionGap", "SessionOffer", "session_position"]

T = TypeVar("T")

SESSION_POSITION = "geogateway-session-seq"
"""The application property that holds a message's position in its session."""
#: How many recently handed-over ids a buffer remembers, to know their late copies.
_RECENT = 4096


def session_position(properties: Mapping[str, object]) -> int | None:
    """The position a geo sender stamped on a message; ``None`` when it has none."""
    value = properties.get(SESSION_POSITION)
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


class SessionOffer(enum.Enum):
    """What :meth:`ReorderBuffer.offer` did with a copy."""

    BUFFERED = "buffered"  # held until its turn (its turn may be now)
    COPY = "copy"  # another copy of a message already held: kept with it
    DUPLICATE = "duplicate"  # a copy of a message already handed over: settle it
    LATE = "late"  # its position was given up on (a gap): hand it over out of order
    UNORDERED = "unordered"  # it has no position: hand it over as it comes


@dataclass(frozen=True, kw_only=True)
class SessionGap:
    """Positions ``first`` to ``last`` of a session never came within ``waited`` seconds."""

    session_id: str
    first: int
    last: int
    waited: float

    @property
    def missing(self) -> int:
        return self.last - self.first + 1


@dataclass
class _Copy(Generic[T]):
    message_id: str
    item: T


class ReorderBuffer(Generic[T]):
    """The messages of one session, held until every earlier position was handed over.

    The driver offers each copy it receives, hands over :meth:`head` when there is
    one, and reports the outcome: :meth:`done` (the handler succeeded: the position
    is passed) or :meth:`failed` (the handler failed: that copy leaves the buffer and
    comes back from its namespace). Copies of one message (the same id at the same
    position, from both namespaces) wait together; :meth:`done` returns the others,
    to be settled as duplicates.

    Args:
        session_id: the session, for reports.
        next_position: the first position not handed over yet (0 for a new session).
        gap_timeout: seconds a missing position is waited for, counted from when a
            later position was first held without it.
    """

    def __init__(self, session_id: str, *, next_position: int = 0,
                 gap_timeout: float = 30.0) -> None:
        if next_position < 0 or not gap_timeout >= 0:
            raise ValueError("next_position and gap_timeout must be >= 0")
        self.session_id = session_id
        self.next_position = next_position
        self.gap_timeout = gap_timeout
        self._held: dict[int, list[_Copy[T]]] = {}
        self._gap_since: float | None = None
        self._recent: OrderedDict[str, int] = OrderedDict()

    def __len__(self) -> int:
        """The messages held (copies of one message count once)."""
        return len(self._held)

    def items(self) -> Iterator[T]:
        """Every copy held, lowest position first (to give them back on close)."""
        for position in sorted(self._held):
            for copy in self._held[position]:
                yield copy.item

    def offer(self, item: T, *, message_id: str, position: int | None, now: float) -> SessionOffer:
        """Take a copy received from a namespace; see :class:`SessionOffer` for the outcomes.

        Only ``BUFFERED`` and ``COPY`` keep ``item``; the caller handles the others.
        """
        if position is None:
            return SessionOffer.UNORDERED
        if position < self.next_position:
            seen = self._recent.get(message_id) == position
            return SessionOffer.DUPLICATE if seen else SessionOffer.LATE
        copies = self._held.get(position)
        if copies is None:
            self._held[position] = [_Copy(message_id, item)]
            self._start_gap(now)
            return SessionOffer.BUFFERED
        copies.append(_Copy(message_id, item))
        return SessionOffer.COPY

    def head(self) -> T | None:
        """The copy whose turn it is (the first one held at :attr:`next_position`), if any."""
        copies = self._held.get(self.next_position)
        return copies[0].item if copies else None

    def ready(self, limit: int) -> list[T]:
        """The heads of the next ``limit`` positions that are all held, in order (the
        first copy of each): what may be handed over one after the other, each once the
        one before is :meth:`done`."""
        out: list[T] = []
        position = self.next_position
        while len(out) < limit and position in self._held:
            out.append(self._held[position][0].item)
            position += 1
        return out

    def done(self, message_id: str, now: float) -> list[T]:
        """The head's message was handled: pass its position (unless a message with
        another id waits at the same position: it is the head next).

        Returns:
            The other copies of the message, to settle as duplicates.
        """
        position = self.next_position
        copies = self._held.get(position, [])
        same = [c.item for c in copies if c.message_id == message_id]
        rest = [c for c in copies if c.message_id != message_id]
        self._remember(message_id, position)
        if rest:
            self._held[position] = rest
            return same[1:] if same else []
        self._held.pop(position, None)
        self.next_position = position + 1
        self._gap_since = None
        self._start_gap(now)
        return same[1:] if same else []

    def failed(self, now: float) -> T | None:
        """The head's handler failed: drop that copy (it comes back from its namespace);
        another copy held at that position becomes the head. Returns the dropped copy.

        Should the copy not come back (dead-lettered after its last delivery), its
        position is a gap like any other, timed from now."""
        copies = self._held.get(self.next_position)
        if not copies:
            return None
        dropped = copies.pop(0)
        if not copies:
            del self._held[self.next_position]
            self._start_gap(now)
        return dropped.item

    def remove(self, item: T, now: float) -> bool:
        """Forget a copy (its namespace's lock is gone, so it will be delivered again)."""
        for position, copies in list(self._held.items()):
            kept = [c for c in copies if c.item is not item]
            if len(kept) != len(copies):
                if kept:
                    self._held[position] = kept
                else:
                    del self._held[position]
                    self._start_gap(now)
                return True
        return False

    def _start_gap(self, now: float) -> None:
        if self._gap_since is None and self._held and self.next_position not in self._held:
            self._gap_since = now

    def skip_to(self, position: int) -> list[T]:
        """Another holder of the session handed positions before ``position`` over:
        go on from there. Returns the copies held below it (to settle as the
        duplicates they should be)."""
        if position <= self.next_position:
            return []
        below = [c.item for p in sorted(self._held) if p < position for c in self._held[p]]
        self._held = {p: c for p, c in self._held.items() if p >= position}
        self.next_position = position
        self._gap_since = None
        return below

    def gap_deadline(self) -> float | None:
        """When the missing head position will be given up on; ``None`` without a gap."""
        if self._gap_since is None or not self._held or self.next_position in self._held:
            return None
        return self._gap_since + self.gap_timeout

    def expire_gap(self, now: float) -> SessionGap | None:
        """Give up on the missing positions before the lowest one held, if they have been
        waited for ``gap_timeout`` seconds: the report, and the buffer goes on from there."""
        deadline = self.gap_deadline()
        if deadline is None or now < deadline:
            return None
        assert self._gap_since is not None
        lowest = min(self._held)
        gap = SessionGap(session_id=self.session_id, first=self.next_position,
                         last=lowest - 1, waited=now - self._gap_since)
        self.next_position = lowest
        self._gap_since = None
        return gap

    def _remember(self, message_id: str, position: int) -> None:
        self._recent[message_id] = position
        self._recent.move_to_end(message_id)
        while len(self._recent) > _RECENT:
            self._recent.popitem(last=False)
