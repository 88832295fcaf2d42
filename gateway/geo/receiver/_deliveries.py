"""The receiver's delivery state: where each received copy is, and which ids this
receiver has delivered and not settled yet.

One object owns it; the pumps, the sorting in ``receive``, settling and the ``run``
loop change it only through its named transitions. A copy is in exactly one place::

    received ──▶ inbox ──take──▶ (being sorted) ──deliver──▶ in flight ──┐
                  ▲                  │      │                            │ complete
                  │                  │      └─hold──▶ held (its id is    ▼
                  │                  │                in flight, here    completing
                  │◀──put_back───────┘                or elsewhere)      │
                  │◀──────── release / recall ◀──── held                 │ done
                  │                                   │                  ▼
                  └────────────────────────────────── └── done ──▶ settled as duplicates

- ``deliver``: the first copy of an id goes to the caller; the id is in flight. An id
  is never delivered twice at once by this receiver.
- ``complete``: the caller finished with it; its done mark is on its way.
- ``done``: the mark committed (or the copy was dead-lettered, or another receiver's
  inbox transaction won): the id leaves, its held copies are handed back to be
  settled as duplicates.
- ``release``: the handler failed, a dead-letter failed, or the mark could not be
  written: the id leaves, its held copies go back to the front of the inbox (one of
  them may be delivered next).
- ``recall``: copies held for an id this receiver does not have in flight (another
  process has it) go back to the inbox to be looked at again.

Nothing here does I/O or awaits; the receiver hears of a change through two callbacks
(``arrived``: there is something to sort; ``room``: the pumps may receive more).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable

from gateway.transports.base import ReceivedMessage

__all__ = ["Deliveries"]


def _nothing() -> None:
    pass


class Deliveries:
    """Where each received copy is: the inbox, held for its id, or in flight.

    Args:
        arrived: called when the inbox got copies to sort (received, given back).
        room: called when copies left the inbox (a pump may receive more).
    """

    def __init__(self, *, arrived: Callable[[], None] = _nothing,
                 room: Callable[[], None] = _nothing) -> None:
        self._arrived = arrived
        self._room = room
        self._inbox: deque[ReceivedMessage] = deque()
        self._held: dict[str, list[ReceivedMessage]] = {}
        self._in_flight: set[str] = set()  # delivered by this receiver, not yet settled
        self._completing: set[str] = set()  # completed by the caller, mark not yet written

    # -- what is where ----------------------------------------------------------------

    @property
    def waiting(self) -> int:
        """Copies in the inbox, received and not sorted yet."""
        return len(self._inbox)

    @property
    def held(self) -> int:
        """Copies held while their id is in flight (here or in another process)."""
        return sum(len(copies) for copies in self._held.values())

    @property
    def completing(self) -> int:
        """Ids the caller completed whose done mark is not written yet."""
        return len(self._completing)

    def in_flight(self, message_id: str) -> bool:
        """Whether this receiver delivered ``message_id`` and has not settled it."""
        return message_id in self._in_flight

    def in_flight_of(self, ids: Iterable[str]) -> set[str]:
        """The ids of ``ids`` in flight here."""
        return self._in_flight.intersection(ids)

    @property
    def caller_holds_none(self) -> bool:
        """Every id in flight is completed already: the caller holds no other message."""
        return self._in_flight <= self._completing

    # -- transitions --------------------------------------------------------------------

    def received(self, copies: Iterable[ReceivedMessage]) -> None:
        """A pump received ``copies``: to the back of the inbox."""
        before = len(self._inbox)
        self._inbox.extend(copies)
        if len(self._inbox) > before:
            self._arrived()

    def take(self, n: int) -> list[ReceivedMessage]:
        """Up to ``n`` copies from the front of the inbox, to be sorted."""
        taken = [self._inbox.popleft() for _ in range(min(n, len(self._inbox)))]
        if taken:
            self._room()
        return taken

    def put_back(self, copies: list[ReceivedMessage]) -> None:
        """Copies taken but not sorted: back to the front of the inbox, in order."""
        if copies:
            self._inbox.extendleft(reversed(copies))
            self._arrived()

    def hold(self, copy: ReceivedMessage) -> None:
        """``copy``'s id is in flight (here or elsewhere): it waits, still locked."""
        self._held.setdefault(copy.message_id, []).append(copy)

    def deliver(self, copy: ReceivedMessage) -> None:
        """``copy`` goes to the caller: its id is in flight.

        Raises:
            RuntimeError: its id is in flight already (a copy delivered twice: a bug).
        """
        if copy.message_id in self._in_flight:
            raise RuntimeError(f"{copy.message_id!r} is in flight already")
        self._in_flight.add(copy.message_id)

    def complete(self, message_id: str) -> None:
        """The caller finished with ``message_id``: its done mark is on its way."""
        self._completing.add(message_id)

    def done(self, message_id: str) -> list[ReceivedMessage]:
        """``message_id`` is settled for good (marked done, dead-lettered, or another
        receiver's transaction won): it leaves; returns its held copies, to be
        settled as duplicates."""
        self._leave(message_id)
        return self._held.pop(message_id, [])

    def release(self, message_id: str) -> None:
        """``message_id`` is not done (its handler or dead-letter failed, its mark could
        not be written): it leaves, and its held copies go back to the front of the
        inbox, one of them to be delivered when the claim allows."""
        self._leave(message_id)
        self.put_back(self._held.pop(message_id, []))

    def recall(self) -> None:
        """Copies held for ids that are not in flight here (another process has them):
        back to the inbox, to be looked at again."""
        for message_id in [i for i in self._held if i not in self._in_flight]:
            self.put_back(self._held.pop(message_id))

    def drain(self) -> list[ReceivedMessage]:
        """Every copy not delivered (the inbox, then the held ones), out of the state."""
        left = [*self._inbox, *(copy for copies in self._held.values() for copy in copies)]
        self._inbox.clear()
        self._held.clear()
        if left:
            self._room()
        return left

    def _leave(self, message_id: str) -> None:
        self._completing.discard(message_id)
        self._in_flight.discard(message_id)
