"""Profile the emulator child of ``bench_sdk_transports.py --profile``.

Loaded at start-up by any Python with this directory on ``PYTHONPATH``; it does
nothing unless ``GEOGATEWAY_BENCH_PROFILE`` names an output prefix. Then the first
SIGUSR1 starts a ``cProfile`` profiler timed by CPU time (``time.process_time``: a
process waiting for the network costs nothing), the next one stops it and writes
``PREFIX.N.prof``, and so on. The benchmark signals around its timed rounds, so the
emulator's start-up and the clients' connection are left out.
"""

from __future__ import annotations

import os
import signal
import time
from types import FrameType

_PREFIX = os.environ.get("GEOGATEWAY_BENCH_PROFILE")

if _PREFIX:
    import cProfile

    _running: list[cProfile.Profile] = []
    _written = [0]

    def _toggle(signum: int, frame: FrameType | None) -> None:
        if not _running:
            profiler = cProfile.Profile(time.process_time)
            _running.append(profiler)
            profiler.enable()
            return
        profiler = _running.pop()
        profiler.disable()
        done = f"{_PREFIX}.{_written[0]}.prof"
        profiler.dump_stats(done + ".part")
        os.replace(done + ".part", done)  # whole, or not there yet
        _written[0] += 1

    signal.signal(signal.SIGUSR1, _toggle)
