"""Compiling the test modules once, before the xdist workers start.

pytest rewrites each test module's asserts and caches the result beside it
(``__pycache__/*-pytest-*.pyc``). In a fresh clone there is no cache yet, and each of
the ten workers rewrote and compiled all ~290 test modules itself at the same moment:
about 8 CPU-seconds each, 80 in all, on two cores. Before the workers start, the
controller has two collecting processes fill the cache (one half of the modules each)
and the workers then find it. Nothing is done when the cache is already there, or
without xdist.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent


def _cold_modules() -> list[Path]:
    tag = f"{sys.implementation.cache_tag}-pytest-{pytest.__version__}.pyc"
    cold = []
    for module in sorted(TESTS.rglob("test_*.py")):
        cached = module.parent / "__pycache__" / f"{module.stem}.{tag}"
        if not cached.exists() or cached.stat().st_mtime < module.stat().st_mtime:
            cold.append(module)
    return cold


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    config = session.config
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        return  # a worker, or no workers
    cold = _cold_modules()
    if len(cold) < 20:
        return
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    halves = [cold[0::2], cold[1::2]]
    processes = [subprocess.Popen(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:xdist",
         "-p", "no:cacheprovider", *map(str, half)],
        cwd=TESTS.parent, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for half in halves]
    for process in processes:
        process.wait()  # a failure here is the workers' to report, as their own
