"""The geo sender's session stamps: each message of a session gets its position in it.

``AsyncGeoSender.send_batch`` stamps every message that has a ``session_id`` with the
application property ``geogateway-session-seq`` (``replication.SESSION_POSITION``):
0, 1, 2, ... per (entity, session), in the order the application sent them, before
the messages go anywhere (a namespace, the durable queue), so every copy of a message
carries the same position. Positions come from a
:class:`~gateway.stores.SqliteSessionStore` in the sender's state directory,
``session-positions-PRIMARY-SECONDARY.db``: a restarted sender (or another sender of
the same pair on the machine, sharing the directory) continues each session where it
was. A message sent again with the same ``MessageId`` (a retry after an error) keeps
the position it got the first time, while this sender runs. A message that already
carries a position (forwarded from another geo sender) keeps it.
"""

from __future__ import annotations

import os
from collections import Counter, OrderedDict
from collections.abc import Sequence
from pathlib import Path

from gateway.stores import SqliteSessionStore
from replication import SESSION_POSITION, Message

__all__ = ["SessionStamper", "needs_stamp"]

#: How many stamped (session, MessageId) pairs are remembered, to stamp a resend alike.
_REMEMBERED = 65_536


def needs_stamp(message: Message) -> bool:
    return message.session_id is not None and SESSION_POSITION not in message.properties


class SessionStamper:
    """Stamps session messages with their positions (see the module docstring).

    Blocking (SQLite): the sender runs :meth:`stamp` off its event loop.

    Args:
        path: the positions file (opened on the first session message).
        entity: the entity the sender sends to.
    """

    def __init__(self, path: str | os.PathLike[str], *, entity: str) -> None:
        self.path = Path(path)
        self.entity = entity
        self._store: SqliteSessionStore | None = None
        self._given: OrderedDict[tuple[str, str], int] = OrderedDict()

    def stamp(self, batch: Sequence[Message]) -> list[Message]:
        """``batch`` with each session message that has no position stamped, in order.

        Raises:
            ConfigError: the positions file cannot be opened.
            GatewayError: it could not be written (nothing is sent then).
        """
        counts: Counter[str] = Counter()
        positions: dict[tuple[str, str], int] = {}
        fresh: list[tuple[str, str]] = []
        for m in batch:
            if needs_stamp(m):
                key = (m.session_id or "", m.message_id)
                if key in positions:
                    continue
                known = self._given.get(key)
                if known is not None:
                    positions[key] = known
                else:
                    positions[key] = -1
                    fresh.append(key)
                    counts[key[0]] += 1
        if not positions:
            return list(batch)
        if counts:
            if self._store is None:
                self._store = SqliteSessionStore(self.path, synchronous="FULL")
            firsts = self._store.reserve(self.entity, counts)
            for key in fresh:
                positions[key] = firsts[key[0]]
                firsts[key[0]] += 1
                self._remember(key, positions[key])
        return [_stamped(m, positions[(m.session_id or "", m.message_id)])
                if needs_stamp(m) else m for m in batch]

    def _remember(self, key: tuple[str, str], position: int) -> None:
        self._given[key] = position
        while len(self._given) > _REMEMBERED:
            self._given.popitem(last=False)

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None


def _stamped(m: Message, position: int) -> Message:
    return Message(m.body, message_id=m.message_id, partition_key=m.partition_key,
                   properties={**m.properties, SESSION_POSITION: position},
                   session_id=m.session_id)
