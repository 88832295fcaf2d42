"""The sender's roles: which namespace is active, persisted, and shared by a fleet.

A role change (a failover, a failback) is a compare-and-swap on the role store from
the state this sender holds: when another sender changed the roles since, the store
answers with its state and this sender adopts it instead of writing its own, so
senders failing over together make one change, not several that undo each other.

With a shared store (PostgreSQL) the sender also reads the roles again every
``refresh_interval`` (in its recovery rounds), so a failover made by one sender of
the fleet is followed by all. When the store cannot be reached, a failover still
happens in this sender (a send never fails for the store) and is written once the
store answers again, as a compare-and-swap from the state it was made from.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeGuard, TypeVar

import anyio.to_thread

from gateway.geo._factory import default_state_dir
from gateway.geo._hooks import GatewayHooks, emit
from gateway.stores import PostgresRoleStore, RoleStore, RoleStoreLike, is_dsn
from replication import ConfigError, GatewayError, RoleState, StoreUnavailable

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool

__all__ = ["RoleKeeper", "RolesTarget", "open_role_store"]

logger = logging.getLogger("geogateway")

T = TypeVar("T")

#: What ``roles_store=`` takes: a PostgreSQL DSN, a ``psycopg_pool.ConnectionPool``,
#: or a store object (``RoleStore``, ``PostgresRoleStore`` or one of your own).
RolesTarget = str | RoleStoreLike | Any


def open_role_store(
    roles_store: RolesTarget | None, *, state_dir: str | os.PathLike[str] | None,
    names: Sequence[str],
) -> tuple[RoleStoreLike, bool]:
    """The role store to use and whether it was opened here (to close).

    Raises:
        ConfigError: ``roles_store`` is neither a DSN, a pool nor a role store, or
            the PostgreSQL store cannot be opened.
    """
    if roles_store is None:
        return RoleStore.of_pair(state_dir or default_state_dir(), names[0], names[1]), True
    if isinstance(roles_store, str):
        if not is_dsn(roles_store):
            raise ConfigError("roles_store must be a PostgreSQL DSN (postgresql://user:"
                              "password@host:port/database); a file goes in state_dir")
        return PostgresRoleStore(roles_store, lazy=True), True
    if all(hasattr(roles_store, name) for name in ("load", "swap", "close", "shared")):
        return roles_store, False
    if _is_pool(roles_store):
        return PostgresRoleStore(roles_store, lazy=True), True
    raise ConfigError(f"roles_store must be a PostgreSQL DSN, a psycopg_pool.ConnectionPool "
                      f"or a role store, not {type(roles_store).__name__}")


def _is_pool(value: object) -> TypeGuard[ConnectionPool[Any]]:
    try:
        from psycopg_pool import ConnectionPool
    except ImportError:
        return False
    return isinstance(value, ConnectionPool)


class RoleKeeper:
    """The roles of one sender (see the module doc).

    Raises:
        ConfigError / StoreUnavailable: the stored roles cannot be read at start (a
            shared store: by :meth:`ready`).
    """

    def __init__(
        self, store: RoleStoreLike, primary: str, secondary: str, *, owned: bool,
        hooks: Sequence[GatewayHooks], clock: Callable[[], float],
    ) -> None:
        self.store = store
        self._owned = owned
        self._hooks = hooks
        self._clock = clock
        #: The roles in force for this sender. A shared store (on a server) is read by
        #: :meth:`ready`, off the loop, not here: until then the initial state.
        self.state = RoleState.initial(primary, secondary)
        self._loaded = store.shared is not True
        if self._loaded:
            try:
                self.state = store.load(primary, secondary)
            except BaseException:
                self.close()
                raise
        # The stored state a change not yet written was made from (the store was
        # unreachable then): written by the next sync, as a compare-and-swap from it.
        self._unsaved: RoleState | None = None
        self._next_refresh = time.monotonic() + self._refresh_interval()
        self._failing: str | None = None  # the store's error, logged once per outage
        self._lock: asyncio.Lock | None = None  # made on the sender's loop
        self._writing: asyncio.Task[None] | None = None  # a change written behind

    async def ready(self) -> None:
        """Read the roles from a shared store (connecting to it) the first time.

        Raises:
            ConfigError: the store cannot be used (its server is unreachable at the
                first connection, refuses the credentials, ...).
        """
        if self._loaded:
            return
        async with self._locked():
            if self._loaded:
                return
            state = self.state
            try:
                self.state = await anyio.to_thread.run_sync(
                    self.store.load, state.preferred, state.standby_preferred)
            except StoreUnavailable as exc:
                # Reached before, down now: a send never fails for the store. The
                # initial roles hold here until the next sync reads the stored ones.
                self._store_failed(exc)
                self._next_refresh = 0.0
            self._loaded = True

    async def fail_over_to(self, namespace: str, *, planned: RoleState) -> bool:
        """Make ``namespace`` active (it took a send that ``planned``'s active one did
        not), unless the roles changed since that send was planned.

        A compare-and-swap from ``planned``: a send planned before another send's role
        change (a slow one that lands on the old active namespace after a failover, or
        one that fails over after a failback) changes nothing, so concurrent sends never
        undo each other's change.

        Args:
            namespace: the namespace that took the send.
            planned: the roles the send was planned with (``roles`` before it began).

        Returns:
            True when the active namespace changed (here, or by adopting a change
            another sender made meanwhile).
        """
        async with self._locked():
            if self.state.active == namespace:
                return False  # a send in flight at the same time did it already
            if not _same_roles(self.state, planned):
                return False  # changed since the send was planned: that change stands
            return await self._change(self.state.swap(self._clock()))

    async def fail_back(self) -> bool:
        """Make the preferred primary active again; True when the active one changed."""
        async with self._locked():
            new = self.state.fail_back(self._clock())
            return False if new == self.state else await self._change(new)

    async def sync(self) -> None:
        """Write a change the store missed, or (a shared store, when due) learn the
        changes other senders made. Never raises: a store error is logged once."""
        if not self._loaded:
            return  # never read (a sender closed before it started): nothing to write
        async with self._locked():
            base = self._unsaved
            if base is None and not (self.store.shared
                                     and time.monotonic() >= self._next_refresh):
                return
            before = self.state
            try:
                if base is not None:
                    stored = await self._io(self.store.swap, base, before)
                else:
                    stored = await self._io(self.store.load, before.preferred,
                                            before.standby_preferred)
            except (GatewayError, OSError) as exc:
                self._store_failed(exc)
                return
            self._store_back()
            self._unsaved = None
            self._next_refresh = time.monotonic() + self._refresh_interval()
            if stored != before:
                self._adopt(before, stored, ours=base is not None and stored == before)

    async def flush(self) -> None:
        """Wait for a role change being written behind, and write one still unsaved."""
        if self._writing is not None:
            await asyncio.shield(self._writing)
        await self.sync()

    def close(self) -> None:
        if self._owned:
            self.store.close()

    def _write_behind(self) -> None:
        if self._writing is None or self._writing.done():
            self._writing = asyncio.get_running_loop().create_task(self.sync())

    # -- the pieces ---------------------------------------------------------------------

    async def _change(self, new: RoleState) -> bool:
        before = self.state
        if self._unsaved is not None:
            # Not written yet: stay local until sync() writes the pending change.
            self._adopt(before, new, ours=True)
            return self.state.active != before.active
        if not self.store.shared:
            # One process's file: what this sender holds is the truth, so the send that
            # failed over need not wait for the write (an fsync: tens of ms on a busy
            # disk, all of it on the failover's path). Written behind, in a thread, as
            # a compare-and-swap from the state it was made from; close() waits for it.
            self._unsaved = before
            self._adopt(before, new, ours=True)
            self._write_behind()
            return self.state.active != before.active
        try:
            stored = await self._io(self.store.swap, before, new)
        except (GatewayError, OSError) as exc:
            self._unsaved = before
            self._adopt(before, new, ours=True)
            self._store_failed(exc)
        else:
            self._store_back()
            self._adopt(before, stored, ours=stored == new)
        return self.state.active != before.active

    def _adopt(self, before: RoleState, after: RoleState, *, ours: bool) -> None:
        self.state = after
        if after.active == before.active:
            return
        by = "" if ours else " (by another sender)"
        unsaved = " (not saved yet: the roles store is unavailable)" if self._unsaved else ""
        logger.warning("failover: %s -> %s%s%s", before.active, after.active, by, unsaved)
        emit(self._hooks, "on_failover", from_namespace=before.active,
             to_namespace=after.active, at=after.changed_at)

    def _store_failed(self, error: BaseException) -> None:
        if str(error) != self._failing:
            self._failing = str(error)
            logger.warning("roles store unavailable, keeping %s active here: %s",
                           self.state.active, error)

    def _store_back(self) -> None:
        if self._failing is not None:
            self._failing = None
            logger.warning("roles store is back")

    def _refresh_interval(self) -> float:
        return float(getattr(self.store, "refresh_interval", 0.0) or 0.0)

    async def _io(self, fn: Callable[..., T], *args: Any) -> T:
        if not self.store.shared and fn != self.store.swap:
            return fn(*args)  # a small local file read: as quick as a thread switch
        return await anyio.to_thread.run_sync(fn, *args)

    def _locked(self) -> asyncio.Lock:
        if self._lock is None:
            self._lock = asyncio.Lock()
        return self._lock


def _same_roles(state: RoleState, planned: RoleState) -> bool:
    # The generation counts changes; the active one too, for a store that keeps none.
    return (state.generation, state.active) == (planned.generation, planned.active)
