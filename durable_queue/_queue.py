"""The durable queue: a SQLite file (WAL) that survives crashes of the process."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import TextIO

from durable_queue import _bindings, _checks, _dead_letters, _inspect, _leases
from durable_queue._group_commit import GroupCommitter
from durable_queue._records import DeadLetteredMessage, QueueStats, StoredMessage
from durable_queue._rows import COLUMNS, stored_from_rows
from durable_queue._sqlite import file_bytes
from durable_queue._store import Row, Store
from replication import Message

__all__ = ["DurableQueue"]

_SELECT = f"SELECT {COLUMNS}, attempts, size FROM messages"


class DurableQueue:
    """A durable FIFO queue per destination in one SQLite file.

    A put returns only once the message is on disk. Several threads may share one
    instance (concurrent puts share commits) and several processes may share one
    file. Only one ``Replayer`` drains a destination at a time.

    A damaged file is never written to: the first write of a handle other than a put
    (an ack, a lease, ...) reads the whole file first (``check``), and once damage is
    found every write raises ``QueueCorrupt`` and leaves the file as it is; copy what
    can be read with ``salvage``. A put that would leave the disk with less than
    512 KiB free (room for a replay to remove what it sent)
    raises ``QueueFull``, as does a disk that filled up anyway.

    Args:
        path: the queue file; created (mode 0600) with its schema when missing.
        max_messages: cap on waiting messages (``None``: no cap).
        max_bytes: cap on the total ``Message.size`` of waiting messages.
        synchronous: SQLite's ``synchronous`` level; ``FULL`` (the default) makes
            a returned put survive a power loss, ``NORMAL`` only a process crash.
        busy_timeout: seconds to wait for another process's write lock.
        shrink: give the space of delivered messages back to the file system when
            the queue is empty or the file is nine tenths free (a ``VACUUM`` of
            what is left; see ``durable_queue._shrink``).

    Raises:
        ConfigError: an option has a bad value.
        QueueCorrupt: the file is damaged or is not a geogateway queue.
        DurableQueueError: the file cannot be opened.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        max_messages: int | None = 1_000_000,
        max_bytes: int | None = 1 << 30,
        synchronous: str = "FULL",
        busy_timeout: float = 30.0,
        shrink: bool = True,
    ) -> None:
        self.max_messages = _checks.cap("max_messages", max_messages)
        self.max_bytes = _checks.cap("max_bytes", max_bytes)
        level = _checks.synchronous(synchronous)
        timeout = _checks.busy_timeout(busy_timeout)
        self.path = Path(os.fspath(path))
        self._store = Store(
            self.path,
            max_messages=self.max_messages,
            max_bytes=self.max_bytes,
            synchronous=level,
            busy_timeout=timeout,
            shrink=bool(shrink),
        )
        self._group: GroupCommitter[Row, int] = GroupCommitter(self._store.commit_puts)

    # -- producing ------------------------------------------------------------

    def put(self, destination: str, message: Message) -> int:
        """Store ``message`` for ``destination``; returns once it is on disk.

        Concurrent callers in one process share commits (group commit).

        Args:
            destination: the destination (entity) name.
            message: the message.

        Raises:
            QueueFull: the message would exceed ``max_messages`` or ``max_bytes``, or
                the disk is (nearly) full; the text names the free space needed.
            QueueCorrupt: this handle found the file damaged; nothing was written.
            DurableQueueError: the file cannot be written (closed, locked too long).

        Returns:
            The message's row id (increasing, never reused).
        """
        if type(destination) is not str or not destination:
            _checks.destination(destination)
        if not isinstance(message, Message):
            raise TypeError(f"message must be a Message, not {type(message).__name__}")
        return self._group.submit((destination, message))

    def put_many(self, destination: str, messages: Sequence[Message]) -> list[int]:
        """Store ``messages`` in one transaction: all of them or none.

        Args:
            destination: the destination (entity) name.
            messages: the messages, in order.

        Raises:
            QueueFull: they would not all fit (caps, or the disk); none was stored.
            QueueCorrupt: this handle found the file damaged; nothing was written.
            DurableQueueError: the file cannot be written.

        Returns:
            Their row ids, in order.
        """
        _checks.destination(destination)
        rows = [(destination, m) for m in messages]
        if any(not isinstance(m, Message) for _, m in rows):
            raise TypeError("messages must all be Message instances")
        if not rows:
            return []
        return self._store.put_rows(rows, all_or_nothing=True)  # type: ignore[return-value]

    @property
    def commits(self) -> int:
        """Write transactions this instance committed for ``put``/``put_many``."""
        return self._store.commits

    # -- consuming ------------------------------------------------------------

    def peek(self, destination: str | None = None, *, limit: int = 10) -> list[StoredMessage]:
        """The oldest waiting messages, without changing anything.

        Args:
            destination: only this destination; ``None``: all, in put order.
            limit: at most this many.

        Returns:
            Oldest first.
        """
        _checks.limit("limit", limit)
        if destination is None:
            sql, params = f"{_SELECT} ORDER BY id LIMIT ?", (limit,)
            return self._store.read(lambda c: stored_from_rows(c.execute(sql, params)))
        return self.get_batch(destination, limit)

    def get_batch(self, destination: str, max_messages: int = 100) -> list[StoredMessage]:
        """The oldest waiting messages of ``destination``, for the replayer.

        Rows are not marked: only the lease holder reads a destination, and it
        settles each batch (``ack``/``nack``/``dead_letter``) before the next.

        Args:
            destination: the destination name.
            max_messages: at most this many.

        Returns:
            Oldest first.
        """
        _checks.destination(destination)
        _checks.limit("max_messages", max_messages)
        sql = f"{_SELECT} WHERE destination = ? ORDER BY id LIMIT ?"
        params = (destination, max_messages)
        return self._store.read(lambda c: stored_from_rows(c.execute(sql, params)))

    def ack(self, items: Sequence[StoredMessage] | Sequence[int], *, shrink: bool = True) -> None:
        """Remove delivered messages in one transaction.

        Args:
            items: the messages (or their row ids); ids no longer waiting are
                ignored, so an ack is idempotent.
            shrink: then vacuum the file if it is due (see ``maybe_shrink``); an
                event loop passes ``False`` and calls ``maybe_shrink`` in a thread.

        Raises:
            QueueCorrupt: the file is damaged; nothing was removed.
            DurableQueueError: the file cannot be written.
        """
        ids = _checks.ids(items)
        if ids:
            self._store.write(lambda c: self._store.remove_ids(c, ids))
            if shrink:
                self._store.shrink()

    def maybe_shrink(self) -> bool:
        """Vacuum the file if it is due: the queue is empty, or nine tenths of the
        file is free (never with ``shrink=False``). Done after each ``ack`` and
        ``purge`` unless told otherwise.

        Returns:
            Whether the file was vacuumed.
        """
        return self._store.shrink()

    def nack(self, items: Sequence[StoredMessage] | Sequence[int], *, error: str = "") -> None:
        """Keep messages at the head of their destination and count a failed attempt.

        Args:
            items: the messages (or row ids) whose delivery failed.
            error: why, kept with each message (last one wins).
        """
        params = [(error, i) for i in _checks.ids(items)]
        if params:
            sql = "UPDATE messages SET attempts = attempts + 1, last_error = ? WHERE id = ?"
            self._store.write(lambda c: c.executemany(sql, params))

    def dead_letter(self, item: StoredMessage | int, reason: str) -> None:
        """Move a waiting message to the dead-letter table; the rest of its
        destination is not held up.

        Args:
            item: the message (or its row id); nothing happens when it is no
                longer waiting (already acknowledged or dead-lettered).
            reason: why it was rejected, kept with it.
        """
        row_id = item.id if isinstance(item, StoredMessage) else int(item)
        self._store.write(lambda c: _dead_letters.move(c, self._store, row_id, str(reason)))

    def dead_letters(
        self, destination: str | None = None, *, limit: int = 100
    ) -> list[DeadLetteredMessage]:
        """Dead-lettered messages, oldest first.

        Args:
            destination: only this destination; ``None``: all.
            limit: at most this many.
        """
        _checks.limit("limit", limit)
        where, params = _checks.where(destination)
        return self._store.read(lambda c: _dead_letters.listing(c, where, params, limit))

    def requeue_dead_letters(self, destination: str | None = None) -> int:
        """Move dead-lettered messages back to the tail of their destination.

        Args:
            destination: only this destination; ``None``: all.

        Raises:
            QueueFull: they would not all fit; none was moved.

        Returns:
            How many were moved.
        """
        where, params = _checks.where(destination)
        return self._store.write(lambda c: _dead_letters.requeue(c, self._store, where, params))

    # -- leases (used by Replayer) --------------------------------------------

    def acquire_lease(self, destination: str, owner: str, *, seconds: float, now: float) -> bool:
        """Take or renew the lease on draining ``destination``.

        Args:
            destination: the destination.
            owner: who asks; the current holder may renew.
            seconds: how long the lease lasts from ``now``.
            now: the current time, on the clock every replayer of the file uses.

        Returns:
            Whether ``owner`` holds the lease now.
        """
        until = now + seconds
        return self._store.write(
            lambda c: _leases.acquire(c, destination, owner, until=until, now=now)
        )

    def release_lease(self, destination: str, owner: str) -> None:
        """Give up the lease on ``destination`` if ``owner`` holds it."""
        self._store.write(lambda c: _leases.release(c, destination, owner))

    def lease_owner(self, destination: str, *, now: float) -> str | None:
        """Who holds an unexpired lease on ``destination`` at ``now``, if anyone."""
        return self._store.read(lambda c: _leases.holder(c, destination, now=now))

    # -- whose messages -------------------------------------------------------

    def bind(self, destination: str, owner: str) -> str | None:
        """Record who ``destination``'s messages are for (an opaque text, such as
        the namespaces and entity; never a secret).

        Args:
            destination: the destination.
            owner: the owner to record; kept while messages wait, replaced when
                the destination is empty.

        Raises:
            ConfigError: messages of another owner wait for ``destination``.

        Returns:
            The owner recorded before, or ``None`` (none: a new destination, or a
            file written before owners were recorded).
        """
        _checks.destination(destination)
        if not isinstance(owner, str) or not owner:
            raise ValueError(f"owner must be a non-empty str, not {owner!r}")
        return self._store.write(lambda c: _bindings.bind(c, self.path, destination, owner))

    def binding(self, destination: str) -> str | None:
        """The owner recorded for ``destination`` (``None``: none recorded)."""
        _checks.destination(destination)
        return self._store.read(lambda c: _bindings.binding(c, destination))

    # -- inspecting -----------------------------------------------------------

    def count(self, destination: str | None = None) -> int:
        """Messages waiting for ``destination`` (``None``: for all)."""
        if destination is None:
            return len(self)
        sql = "SELECT count(*) FROM messages WHERE destination = ?"
        return int(self._store.read(lambda c: c.execute(sql, (destination,)).fetchone()[0]))

    def has_waiting(self, destination: str) -> bool:
        """Whether any message waits for ``destination`` (one index seek, unlike
        ``count``, which reads every entry of the destination)."""
        sql = "SELECT 1 FROM messages WHERE destination = ? LIMIT 1"
        return self._store.read(lambda c: c.execute(sql, (destination,)).fetchone()) is not None

    def oldest(self, destination: str) -> float | None:
        """When the oldest message waiting for ``destination`` was put (seconds since
        the epoch), or ``None`` when none waits; one index seek, like ``has_waiting``."""
        sql = ("SELECT enqueued_at FROM messages WHERE destination = ? "
               "ORDER BY id LIMIT 1")
        row = self._store.read(lambda c: c.execute(sql, (destination,)).fetchone())
        return None if row is None else float(row[0])

    def __len__(self) -> int:
        return self._store.waiting()

    def destinations(self) -> list[str]:
        """Destinations with waiting messages, sorted."""
        sql = "SELECT DISTINCT destination FROM messages ORDER BY destination"
        return self._store.read(lambda c: [r[0] for r in c.execute(sql)])

    def stats(self) -> QueueStats:
        """A snapshot of the queue: per destination, totals, dead letters, file size."""
        return self._store.read(lambda c: _inspect.stats(c, self))

    def check(self, *, max_age: float | None = None) -> None:
        """Read the whole file and verify its structure; nothing is changed.

        ``peek`` and ``dead_letters`` read only the pages of the rows they return, so a
        page damaged further in goes unnoticed by them; inspections call this first.
        It reads the whole file (about 0.7 s per GiB from the page cache). Writes
        other than puts run it once per handle before the first one, and each drain
        of a ``Replayer`` before it sends: a damaged file is never written to.

        Args:
            max_age: skip the read when this handle found the file sound less than
                this many seconds ago (``None``: always read it).

        Raises:
            QueueCorrupt: a page of the file is damaged; from then on this handle
                refuses every write (puts included) with ``QueueCorrupt``.
        """
        self._store.verify(max_age=max_age)

    def export(
        self,
        fp: TextIO,
        destination: str | None = None,
        *,
        include_dead_letters: bool = False,
    ) -> int:
        """Write messages to ``fp`` as JSON lines, oldest first; nothing is removed.

        Each line holds ``id, destination, message_id, partition_key, properties,
        enqueued_at, attempts, body, body_encoding`` (``"utf-8"`` when the body is
        valid UTF-8 text, else ``"base64"``) and ``dead_letter``; a message of a session
        adds ``session_id``, dead letters ``reason`` and ``dead_lettered_at``.

        Args:
            fp: a text file open for writing.
            destination: only this destination; ``None``: all.
            include_dead_letters: also write the dead-lettered messages.

        Returns:
            The number of lines written.
        """
        return self._store.read(
            lambda c: _inspect.export(c, fp, destination, include_dead_letters=include_dead_letters)
        )

    def purge(self, destination: str | None = None) -> int:
        """Delete waiting messages (dead letters are kept).

        Args:
            destination: only this destination; ``None``: all.

        Returns:
            How many were deleted.
        """
        where, params = _checks.where(destination)
        removed = self._store.write(lambda c: self._store.remove(c, where, params))
        self._store.shrink()
        return removed

    def shrink(self) -> int:
        """Give every free page back to the file system now (done on its own after
        deletes when the queue is empty or the file mostly free, unless
        ``shrink=False``). It rewrites the messages still waiting.

        Returns:
            How many bytes the file (with its ``-wal``) shrank by.
        """
        before = file_bytes(self.path)
        self._store.shrink(force=True)
        return max(0, before - file_bytes(self.path))

    # -- lifecycle ------------------------------------------------------------

    def close(self) -> None:
        """Close the file; further calls raise ``DurableQueueError``. Idempotent."""
        self._store.close()

    def __enter__(self) -> DurableQueue:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"DurableQueue({str(self.path)!r})"

