"""A de-duplication store seen through a scope: ids namespaced by the entity they came
from, so that receivers of several entities may share one store.

The copies a topic makes of one message carry the same ``MessageId`` in every
subscription; a receiver of subscription A that marked an id done must not suppress
subscription B's copy. A geo receiver on a subscription therefore keys its window on
``SCOPE|MessageId``, ``SCOPE`` being the subscription's path in lower case (entity
names never hold ``|``). Receivers of one subscription in several processes use the
same scope and share their window as before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from replication._dedup_types import DedupStore, DedupWindow, TransactionalDedupStore, Verdict

__all__ = ["ScopedDedupStore", "scoped"]


class ScopedDedupStore(DedupStore):
    """``store`` with every id prefixed by ``scope|`` (see the module docstring).

    Args:
        store: the store that keeps the ids.
        scope: what namespaces them (an entity path; it must not hold ``|``).
    """

    def __init__(self, store: DedupStore, scope: str) -> None:
        if not scope or "|" in scope:
            raise ValueError(f"a dedup scope is a non-empty name without '|', not {scope!r}")
        self.store = store
        self.prefix = scope + "|"

    @property
    def window(self) -> DedupWindow:  # type: ignore[override]
        return self.store.window

    def __getattr__(self, name: str) -> Any:
        # What a store offers beyond the protocol (a pool to ``reserve`` for concurrent
        # inbox handlers, a ``ping`` while it is unreachable, ...) is the store's own.
        if name == "store":
            raise AttributeError(name)
        return getattr(self.store, name)

    def claim(self, message_ids: Sequence[str], *, owner: str, now: float,
              lease: float) -> list[Verdict]:
        return self.store.claim([self.prefix + i for i in message_ids], owner=owner, now=now,
                                lease=lease)

    def finish(self, message_id: str, *, owner: str, succeeded: bool, now: float) -> None:
        self.store.finish(self.prefix + message_id, owner=owner, succeeded=succeeded, now=now)

    def finish_many(self, message_ids: Sequence[str], *, owner: str, succeeded: bool,
                    now: float) -> None:
        self.store.finish_many([self.prefix + i for i in message_ids], owner=owner,
                               succeeded=succeeded, now=now)

    def peek(self, message_id: str, *, now: float) -> Verdict:
        return self.store.peek(self.prefix + message_id, now=now)

    def prune(self, *, now: float, window: DedupWindow) -> int:
        return self.store.prune(now=now, window=window)

    def close(self) -> None:
        self.store.close()


class _ScopedTransactional(ScopedDedupStore):
    """A :class:`ScopedDedupStore` over a transactional store (the inbox)."""

    store: Any

    def finish_with_effect(self, message_id: str, *, owner: str, now: float,
                           effect: Callable[[Any], None]) -> bool:
        result: bool = self.store.finish_with_effect(self.prefix + message_id, owner=owner,
                                                     now=now, effect=effect)
        return result


def scoped(store: DedupStore, scope: str) -> ScopedDedupStore:
    """``store`` seen through ``scope``; transactional when ``store`` is."""
    if isinstance(store, TransactionalDedupStore):
        return _ScopedTransactional(store, scope)
    return ScopedDedupStore(store, scope)
