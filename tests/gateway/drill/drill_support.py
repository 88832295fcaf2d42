"""Start ``geogateway drill`` as a process, SIGKILL it mid-run, and find what it left.

Processes are found by a scan of ``/proc`` for command lines that mention the test's
own data directory: the drill's emulator (``--data-dir DIR/...``) and workers
(``--root DIR/...``) name it, and nothing else on the machine does.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

#: How long a killed drill's children may take to go (the drills' promise).
CHILDREN_GONE = 5.0


def processes_mentioning(marker: str) -> dict[int, str]:
    """pid -> command line of each live process whose command line contains ``marker``."""
    if not Path("/proc/self/cmdline").exists():
        pytest.skip("needs /proc")
    found: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            line = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if marker in line:
                found[int(entry.name)] = line
    return found


def kill_drill_midway(data_dir: Path, *args: str, children: int) -> dict[int, str]:
    """Start ``geogateway drill --data-dir DATA_DIR ARGS``; once ``children`` processes
    of its own are up and its sender has opened its durable queue, SIGKILL it; return
    the processes under ``data_dir`` still alive ``CHILDREN_GONE`` seconds later (each
    is then killed, by pid)."""
    marker = str(data_dir)
    log = (data_dir.parent / "drill.err").open("wb")
    drill = subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "drill", "--data-dir", marker, *args],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log)
    log.close()
    try:
        deadline = time.monotonic() + 90
        while True:
            mine = {p for p in processes_mentioning(marker) if p != drill.pid}
            if len(mine) >= children and any(data_dir.rglob("buffer.db")):
                break
            assert drill.poll() is None, (data_dir.parent / "drill.err").read_text()
            assert time.monotonic() < deadline, "the drill's children did not start"
            time.sleep(0.1)
        time.sleep(1.0)  # messages are flowing now
        assert drill.poll() is None, "the drill ended before it was killed: send more"
    finally:
        drill.send_signal(signal.SIGKILL)
        drill.wait()
    left: dict[int, str] = {}
    gone_by = time.monotonic() + CHILDREN_GONE
    while time.monotonic() < gone_by:
        left = processes_mentioning(marker)
        if not left:
            break
        time.sleep(0.1)
    for pid in left:  # do not leave them to the next test
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return left
