"""Per-operation deadlines that adapt to what a namespace normally takes (pure, no I/O).

A namespace that hangs (it accepts connections and never answers) is an outage too, but
nothing fails: only a deadline finds it out. A fixed deadline is either too long for a
fast namespace or too short for a slow one, so each namespace and kind of operation gets
its own, from the latencies of its recent successful operations::

    deadline = clamp(multiplier x p99(recent latencies), floor, ceiling) + per_mib x MiB

The drivers (the sender, the receivers, the consumer) time each operation on the
estimator's clock, tell it how long the successful ones took, and ask it for the next
deadline; the estimator decides, they do the waiting.
"""

from __future__ import annotations

import bisect
import enum
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from replication._errors import ConfigError

__all__ = [
    "RECEIVE_DEADLINES",
    "DeadlineEstimator",
    "DeadlinePolicy",
    "LatencyWindow",
    "Operation",
]

_MIB = float(1 << 20)


class Operation(enum.Enum):
    """The kinds of operation that get a deadline each (their latencies differ)."""

    #: Sending a batch (the size allowance ``per_mib`` applies).
    SEND = "send"
    #: Completing, abandoning or dead-lettering a received message.
    SETTLE = "settle"
    #: A queue receive; its latency counts beyond the receive's own ``max_wait``.
    RECEIVE = "receive"
    #: A partition read; its latency counts beyond the read's own ``max_wait``.
    READ = "read"
    #: A health probe of a namespace.
    PROBE = "probe"
    #: A management call: the partition ids of an entity.
    MANAGE = "manage"
    #: A checkpoint store call (checkpoint write or read, ownership list).
    CHECKPOINT = "checkpoint"


def _seconds(name: str, value: object, *, positive: bool = True) -> float:
    # ``not value > 0`` also refuses NaN; bool is an int but not a duration.
    if (isinstance(value, bool) or not isinstance(value, (int, float))
            or not (value > 0 if positive else value >= 0) or math.isinf(value)):
        least = "> 0" if positive else ">= 0"
        raise ConfigError(f"deadline {name} must be a number of seconds {least}, "
                          f"not {value!r}")
    return float(value)


@dataclass(frozen=True, kw_only=True)
class DeadlinePolicy:
    """How long one operation on a namespace may take before it counts as failed.

    The deadline of an operation is ``multiplier`` times the ``percentile`` of the
    last ``window`` successful latencies of that namespace and kind of operation,
    kept between ``floor`` and ``ceiling``, plus ``per_mib`` seconds per MiB of a
    batch sent. Until a namespace has answered that kind of operation twice, it is
    ``initial``: the first answer is not counted, as it includes opening the
    connection, which takes longer than a send on it.

    The defaults let the first send after a namespace freezes complete (on the other
    namespace) within 1 s, with local or emulated latencies of a few milliseconds.

    Args:
        floor: the shortest deadline, in seconds (> 0): a hiccup shorter than this is
            never taken for an outage.
        ceiling: the longest deadline from latencies, in seconds (>= floor).
        multiplier: how many times the percentile a deadline allows (>= 1).
        percentile: which percentile of the recent latencies, from 50 to 100.
        window: how many recent latencies are kept per namespace and operation (>= 1).
        initial: the deadline before a latency is known (>= floor). In active mode,
            once the other namespace took a send, a namespace still at ``initial``
            gets at most ``max(ceiling, 2 x the other's time)`` from the send's start:
            a sender started while a namespace hangs returns within a second too.
        per_mib: seconds added per MiB of a batch sent (>= 0).
    """

    floor: float = 0.3
    ceiling: float = 0.75
    multiplier: float = 4.0
    percentile: float = 99.0
    window: int = 256
    initial: float = 2.0
    per_mib: float = 1.0

    def __post_init__(self) -> None:
        for name in ("floor", "ceiling", "initial"):
            object.__setattr__(self, name, _seconds(name, getattr(self, name)))
        object.__setattr__(self, "per_mib", _seconds("per_mib", self.per_mib, positive=False))
        if self.ceiling < self.floor:
            raise ConfigError(f"deadline ceiling ({self.ceiling:g} s) must not be less than "
                              f"its floor ({self.floor:g} s)")
        if self.initial < self.floor:
            raise ConfigError(f"deadline initial ({self.initial:g} s) must not be less than "
                              f"its floor ({self.floor:g} s)")
        m = self.multiplier
        if isinstance(m, bool) or not isinstance(m, (int, float)) or not 1 <= m < math.inf:
            raise ConfigError(f"deadline multiplier must be a number >= 1, not {m!r}")
        p = self.percentile
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 50 <= p <= 100:
            raise ConfigError(f"deadline percentile must be a number from 50 to 100, not {p!r}")
        w = self.window
        if isinstance(w, bool) or not isinstance(w, int) or w < 1:
            raise ConfigError(f"deadline window must be a whole number >= 1, not {w!r}")

    def allowance(self, size: int) -> float:
        """The seconds added to a deadline for a batch of ``size`` bytes."""
        return self.per_mib * size / _MIB

    def clamp(self, latency: float) -> float:
        """The deadline for a namespace whose latency percentile is ``latency``."""
        return min(self.ceiling, max(self.floor, self.multiplier * latency))


RECEIVE_DEADLINES = DeadlinePolicy(floor=1.0, ceiling=3.0, initial=3.0)
"""The receivers' and the partition consumer's default: they only need a hung namespace (or
store) not to hold up the other namespace, the other partitions or a stop, so a slow answer
is given more room than a sender, which must hedge within a second, gives."""


class LatencyWindow:
    """The last ``size`` latencies, kept sorted as well, so a percentile is one lookup."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._order: deque[float] = deque()
        self._sorted: list[float] = []

    def __len__(self) -> int:
        return len(self._order)

    def add(self, seconds: float) -> None:
        """Remember ``seconds``, forgetting the oldest latency beyond the window."""
        self._order.append(seconds)
        bisect.insort(self._sorted, seconds)
        if len(self._order) > self._size:
            oldest = self._order.popleft()
            del self._sorted[bisect.bisect_left(self._sorted, oldest)]

    def percentile(self, p: float) -> float:
        """The ``p``-th percentile (nearest rank); 0.0 when empty."""
        if not self._sorted:
            return 0.0
        rank = max(1, math.ceil(p / 100 * len(self._sorted)))
        return self._sorted[rank - 1]


class DeadlineEstimator:
    """Deadlines per namespace and kind of operation, from their recent latencies.

    Args:
        policy: floor, ceiling, multiplier, percentile, window, initial, per_mib.
        clock: monotonic seconds, to time operations (inject one in tests).
    """

    def __init__(self, policy: DeadlinePolicy | None = None, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.policy = policy or DeadlinePolicy()
        self.clock = clock
        self._windows: dict[tuple[str, Operation], LatencyWindow] = {}
        self._opened: set[tuple[str, Operation]] = set()  # their first answer came
        # The deadline without a size allowance, until the next latency changes it.
        self._cached: dict[tuple[str, Operation], float] = {}

    def deadline(self, namespace: str, operation: Operation, *, size: int = 0) -> float:
        """Seconds the next ``operation`` on ``namespace`` may take.

        Args:
            namespace: the namespace's name.
            operation: the kind of operation.
            size: bytes of the batch sent (``per_mib`` seconds per MiB are added).
        """
        key = (namespace, operation)
        base = self._cached.get(key)
        if base is None:
            window = self._windows.get(key)
            policy = self.policy
            base = (policy.initial if window is None or not len(window)
                    else policy.clamp(window.percentile(policy.percentile)))
            self._cached[key] = base
        return base + self.policy.allowance(size) if size else base

    def observe(self, namespace: str, operation: Operation, seconds: float, *,
                size: int = 0) -> None:
        """Record that ``operation`` on ``namespace`` succeeded in ``seconds``.

        Only successful operations count: a hang must not lengthen the deadline that
        finds it out. The first one of each namespace and operation does not count
        either: it includes opening the connection. The size allowance of the batch is
        taken off first.
        """
        key = (namespace, operation)
        if key not in self._opened:
            self._opened.add(key)
            return
        window = self._windows.get(key)
        if window is None:
            window = self._windows[key] = LatencyWindow(self.policy.window)
        window.add(max(0.0, seconds - self.policy.allowance(size)))
        self._cached.pop(key, None)

    def samples(self, namespace: str, operation: Operation) -> int:
        """How many latencies of ``operation`` on ``namespace`` are remembered."""
        window = self._windows.get((namespace, operation))
        return 0 if window is None else len(window)
