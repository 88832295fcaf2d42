"""The in-memory front of the de-duplicator: a compact window of done ids.

A Python ``set`` of str ids costs about 150 MB per million (each str object is
~80 bytes, plus the set's slots). The front keeps a 64-bit keyed hash per id
instead, in two flat arrays, so a million ids cost about 33 MB:

* an open-addressing hash set on ``array('Q')`` (linear probing, load <= 0.5,
  backward-shift deletion so that no tombstones build up): 16 MB at 1M ids;
* a FIFO ring of ``(hash, done_at)`` on ``array('Q')`` / ``array('d')`` that
  evicts by count and by time: 16 MB at 1M ids.

A hit is a hash match, not an exact id match. With ``n`` ids in the window the
probability that a new id is taken for a duplicate is about ``n / 2**64``
(5.4e-14 per check at a million ids). The hash is the interpreter's str hash
(SipHash-1-3 under the per-process random secret, unless ``PYTHONHASHSEED`` pins
it) or blake2b under a given key, so senders cannot predict hashes and craft ids
that collide on purpose. The front is never persisted or shared, so a per-process
key is enough; after a restart it starts empty and the store answers.
"""

from __future__ import annotations

import hashlib
import secrets
import sys
from array import array

__all__ = ["HashWindow"]

_MIN_SLOTS = 1024
_MIN_RING = 1024
_MASK64 = (1 << 64) - 1


class _HashSet:
    """A set of non-zero 64-bit ints in one ``array('Q')``; 0 marks an empty slot."""

    def __init__(self) -> None:
        self._slots = array("Q", bytes(8 * _MIN_SLOTS))
        self._mask = _MIN_SLOTS - 1
        self._len = 0

    def __len__(self) -> int:
        return self._len

    @property
    def nbytes(self) -> int:
        return len(self._slots) * self._slots.itemsize

    def __contains__(self, h: int) -> bool:
        slots, mask = self._slots, self._mask
        i = h & mask
        while True:
            s = slots[i]
            if s == h:
                return True
            if s == 0:
                return False
            i = (i + 1) & mask

    def add(self, h: int) -> bool:
        """Add ``h``; return False when it was already there."""
        if (self._len + 1) * 2 > len(self._slots):
            self._resize(len(self._slots) * 2)
        slots, mask = self._slots, self._mask
        i = h & mask
        while True:
            s = slots[i]
            if s == h:
                return False
            if s == 0:
                slots[i] = h
                self._len += 1
                return True
            i = (i + 1) & mask

    def discard(self, h: int) -> None:
        slots, mask = self._slots, self._mask
        i = h & mask
        while True:
            s = slots[i]
            if s == 0:
                return
            if s == h:
                break
            i = (i + 1) & mask
        # Backward-shift deletion: pull later members of the probe run into the hole
        # unless their home slot lies cyclically in (hole, j]; lookups then never
        # need tombstones, so the table does not degrade under steady churn.
        j = i
        while True:
            j = (j + 1) & mask
            s = slots[j]
            if s == 0:
                break
            home = s & mask
            if (i < j and i < home <= j) or (i > j and (home > i or home <= j)):
                continue
            slots[i] = s
            i = j
        slots[i] = 0
        self._len -= 1

    def _resize(self, size: int) -> None:
        old = self._slots
        self._slots = array("Q", bytes(8 * size))
        self._mask = size - 1
        self._len = 0
        for h in old:
            if h:
                self.add(h)


class _Ring:
    """A FIFO of ``(hash, time)`` pairs in two circular arrays that grow by doubling."""

    def __init__(self) -> None:
        self._hs = array("Q", bytes(8 * _MIN_RING))
        self._ts = array("d", bytes(8 * _MIN_RING))
        self._start = 0
        self._size = 0

    def __len__(self) -> int:
        return self._size

    @property
    def nbytes(self) -> int:
        return len(self._hs) * 16

    def push(self, h: int, t: float, limit: int) -> None:
        cap = len(self._hs)
        if self._size == cap:
            self._grow(min(cap * 2, max(limit, cap + 1)))
            cap = len(self._hs)
        i = (self._start + self._size) % cap
        self._hs[i] = h
        self._ts[i] = t
        self._size += 1

    def oldest(self) -> tuple[int, float]:
        return self._hs[self._start], self._ts[self._start]

    def pop(self) -> int:
        h = self._hs[self._start]
        self._start = (self._start + 1) % len(self._hs)
        self._size -= 1
        return h

    def _grow(self, cap: int) -> None:
        # Unroll the circular layout into the new arrays, oldest first.
        s = self._start
        hs = self._hs[s:] + self._hs[:s]
        ts = self._ts[s:] + self._ts[:s]
        pad = bytes(8 * (cap - len(hs)))
        hs.frombytes(pad)
        ts.frombytes(pad)
        self._hs, self._ts, self._start = hs, ts, 0


class HashWindow:
    """The done ids of one process within a window, as 64-bit keyed hashes.

    Bounded by count (the oldest hash is evicted first) and by time (hashes done at
    or before ``now - seconds`` are evicted by :meth:`expire`).

    Args:
        seconds: how long a done id stays in the window.
        count: at most this many ids are kept.
        key: hash with blake2b under this key instead of the interpreter's str
            hash (tests pin it; also used where ``hash()`` is narrower than 64 bits).
    """

    def __init__(self, *, seconds: float, count: int, key: bytes | None = None) -> None:
        self._seconds = seconds
        self._count = count
        # Where str hashes are narrower than 64 bits, blake2b with a random key
        # keeps the false-positive rate at n / 2**64.
        if key is None and sys.hash_info.width < 64:
            key = secrets.token_bytes(16)
        self._keyed = None if key is None else hashlib.blake2b(digest_size=8, key=key)
        self._set = _HashSet()
        self._ring = _Ring()

    def __len__(self) -> int:
        return len(self._set)

    @property
    def nbytes(self) -> int:
        """Bytes held by the arrays (the table and the ring)."""
        return self._set.nbytes + self._ring.nbytes

    def hash(self, message_id: str) -> int:
        """The non-zero 64-bit keyed hash of ``message_id``."""
        if self._keyed is None:
            # The str hash is SipHash keyed with the interpreter's random secret,
            # cached on the str object, and 8x faster than blake2b; the front never
            # leaves the process, so a per-process key is all it needs.
            h = hash(message_id) & _MASK64
        else:
            keyed = self._keyed.copy()
            keyed.update(message_id.encode("utf-8", "surrogatepass"))
            h = int.from_bytes(keyed.digest(), "little")
        # 0 marks an empty slot in the table, so fold the one zero hash onto 1.
        return h or 1

    def __contains__(self, h: int) -> bool:
        return h in self._set

    def add(self, h: int, now: float) -> None:
        """Record ``h`` as done at ``now``; a hash already present keeps its first time.

        Keeping the first time is conservative for the front: it forgets the id no
        later than the store does, and a miss only costs a store lookup.
        """
        if h in self._set:
            return
        while len(self._ring) >= self._count:
            self._set.discard(self._ring.pop())
        self._set.add(h)
        self._ring.push(h, now, self._count)

    def expire(self, now: float) -> int:
        """Evict hashes done at or before ``now - seconds``; return how many."""
        cutoff = now - self._seconds
        ring, evicted = self._ring, 0
        while len(ring) and ring.oldest()[1] <= cutoff:
            self._set.discard(ring.pop())
            evicted += 1
        return evicted
