"""``gateway._support.parent_watch``: a child started through it ends when its parent does.

Each mechanism on its own, with real processes: the pipe (this test holds the write
end and closes it), the kernel's parent-death signal (a parent SIGKILLed), the parent
already gone at start, and the hard stop of a child that ignores SIGTERM. The drills'
end-to-end kills are in test_drill_transports.py and test_drill_consumers.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gateway._support.parent_watch import GRACE, child_command

SLEEP = ["-m", "timeit", "-n", "1", "-r", "1", "import time; time.sleep(60)"]
WATCH = [sys.executable, "-m", "gateway._support.parent_watch"]


def test_the_child_stops_when_its_parents_pipe_closes() -> None:
    read, write = os.pipe()
    child = subprocess.Popen([*WATCH, "--parent-pid", str(os.getpid()),
                              "--parent-fd", str(read), *SLEEP], pass_fds=(read,))
    os.close(read)
    try:
        time.sleep(1.0)
        assert child.poll() is None  # running, while the write end is open
        os.close(write)  # what the kernel does when this process dies
        assert child.wait(timeout=5) == -signal.SIGTERM
    finally:
        child.kill()
        child.wait()


def test_a_child_that_ignores_sigterm_is_ended_after_the_grace(tmp_path: Path) -> None:
    (tmp_path / "stubborn.py").write_text(
        "import signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n")
    read, write = os.pipe()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    child = subprocess.Popen([*WATCH, "--parent-pid", str(os.getpid()), "--parent-fd",
                              str(read), "-m", "stubborn"], pass_fds=(read,), env=env,
                             stdout=subprocess.PIPE)
    os.close(read)
    try:
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        os.close(write)
        started = time.monotonic()
        assert child.wait(timeout=GRACE + 5) == 128 + signal.SIGTERM
        assert time.monotonic() - started >= GRACE - 0.5
    finally:
        child.kill()
        child.wait()
        child.stdout.close()  # type: ignore[union-attr]


def running(pid: int) -> bool:
    try:
        return bool(Path(f"/proc/{pid}/cmdline").read_bytes())  # a zombie's is empty
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux")
def test_the_child_stops_when_its_parent_is_killed_without_a_pipe() -> None:
    # A parent that starts a watched child with no pipe (the kernel signal only),
    # prints its pid, and waits; then it is SIGKILLed.
    parent_code = (
        "import os, subprocess, sys, time\n"
        f"child = subprocess.Popen({WATCH!r} + ['--parent-pid', str(os.getpid())]"
        f" + {SLEEP!r})\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(60)\n")
    parent = subprocess.Popen([sys.executable, "-c", parent_code], stdout=subprocess.PIPE)
    assert parent.stdout is not None
    with parent.stdout:
        child = int(parent.stdout.readline())
    time.sleep(1.0)
    assert running(child)
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and running(child):
        time.sleep(0.05)
    alive = running(child)
    if alive:
        os.kill(child, signal.SIGKILL)
    assert not alive


def test_a_child_whose_parent_is_already_gone_stops_at_once() -> None:
    # It was told its parent is pid 1, but its parent is this process: as if the
    # parent had died (and it was re-parented) before the watch was in place.
    child = subprocess.run([*WATCH, "--parent-pid", "1", *SLEEP], timeout=30)
    assert child.returncode == -signal.SIGTERM


def test_child_command_and_usage() -> None:
    argv, fds = child_command(["-m", "gateway.cli", "--help"])
    assert argv[:3] == [sys.executable, "-m", "gateway._support.parent_watch"]
    assert argv[-3:] == ["-m", "gateway.cli", "--help"] and len(fds) == 1
    assert str(os.getpid()) in argv and str(fds[0]) in argv
    with pytest.raises(ValueError):
        child_command(["script.py"])
    usage = subprocess.run(WATCH, capture_output=True, text=True, timeout=30)
    assert usage.returncode == 1 and "usage:" in usage.stderr
    assert "Traceback" not in usage.stderr
