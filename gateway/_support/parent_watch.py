"""Child processes that end with their parent, even when the parent is SIGKILLed.

The drills and benchmarks start ``geogateway emulator`` and receiver workers as child
processes. When the parent stops normally it stops them; when it is killed it cannot.
:func:`child_command` wraps a child's command line so that the child watches its
parent without the parent's cooperation, in two ways:

* on Linux, ``prctl(PR_SET_PDEATHSIG, SIGTERM)``: the kernel sends the child SIGTERM
  when the parent dies (strictly, when the parent's thread that started it ends: the
  drills start their children from their event loop's thread, which outlives them);
* everywhere on POSIX, a pipe: the parent keeps the write end open for as long as it
  lives (it never writes), the child reads the other end in a thread; end of file
  means the parent is gone, however it ended.

Either way the child gets SIGTERM, its graceful stop (an emulator closes its
listeners; a worker checkpoints and releases its partitions), and, should that take
more than :data:`GRACE` seconds, is ended with ``os._exit``.

Run as ``python -m gateway._support.parent_watch --parent-pid PID [--parent-fd FD] -m MODULE
ARGS...``: it installs the watch, then runs ``MODULE`` as ``__main__`` with ``ARGS``.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import runpy
import signal
import sys
import threading
import time
from collections.abc import Sequence

__all__ = ["GRACE", "child_command", "main", "watch_parent"]

#: Seconds a child has for its graceful stop once its parent is gone.
GRACE = 3.0
_PR_SET_PDEATHSIG = 1
_pipe: tuple[int, int] | None = None
_lock = threading.Lock()


def _parent_pipe() -> int | None:
    """The read end of this process's lifeline pipe (created once), or None off POSIX."""
    global _pipe
    if os.name != "posix":
        return None
    with _lock:
        if _pipe is None:
            _pipe = os.pipe()  # both ends non-inheritable: only pass_fds hands one out
        return _pipe[0]


def _forget_pipe_in_fork() -> None:
    # A forked copy of this process must not keep this process's children alive.
    global _pipe
    if _pipe is not None:
        with contextlib.suppress(OSError):
            os.close(_pipe[1])
        _pipe = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pipe_in_fork)


def child_command(python_args: Sequence[str]) -> tuple[list[str], tuple[int, ...]]:
    """``(argv, pass_fds)`` that run ``python PYTHON_ARGS`` as a child ending with us.

    ``python_args`` must start with ``-m MODULE``. Pass ``pass_fds`` to
    ``subprocess.Popen`` / ``asyncio.create_subprocess_exec``.
    """
    if len(python_args) < 2 or python_args[0] != "-m":
        raise ValueError("child_command needs ['-m', MODULE, ...]")
    fd = _parent_pipe()
    watch = ["--parent-pid", str(os.getpid())]
    if fd is not None:
        watch += ["--parent-fd", str(fd)]
    return ([sys.executable, "-m", "gateway._support.parent_watch", *watch, *python_args],
            (fd,) if fd is not None else ())


def watch_parent(parent_pid: int, parent_fd: int | None = None, grace: float = GRACE) -> None:
    """Stop this process (SIGTERM, then ``os._exit`` after ``grace`` s) when the
    parent ``parent_pid`` is gone: by the kernel's parent-death signal on Linux, and
    by end of file on ``parent_fd`` (the parent holds its write end)."""
    if sys.platform.startswith("linux"):
        _set_parent_death_signal(signal.SIGTERM)
    if parent_fd is not None:
        threading.Thread(target=_wait_for_eof, args=(parent_fd, grace), daemon=True,
                         name="geogateway-parent-watch").start()
    if os.getppid() != parent_pid:  # it died before the watch was in place
        _parent_gone(grace)


def _set_parent_death_signal(sig: int) -> None:
    with contextlib.suppress(OSError, AttributeError, TypeError):
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)


def _wait_for_eof(fd: int, grace: float) -> None:
    while True:
        try:
            if not os.read(fd, 512):
                break
        except InterruptedError:
            continue
        except OSError:
            break
    _parent_gone(grace)


def _parent_gone(grace: float) -> None:
    def hard_stop() -> None:
        time.sleep(grace)
        os._exit(128 + signal.SIGTERM)

    threading.Thread(target=hard_stop, daemon=True, name="geogateway-parent-gone").start()
    os.kill(os.getpid(), signal.SIGTERM)


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    parent_pid: int | None = None
    parent_fd: int | None = None
    while args and args[0] in ("--parent-pid", "--parent-fd") and len(args) > 1:
        option, value = args[0], int(args[1])
        del args[:2]
        if option == "--parent-pid":
            parent_pid = value
        else:
            parent_fd = value
    if parent_pid is None or len(args) < 2 or args[0] != "-m":
        sys.exit("usage: python -m gateway._support.parent_watch --parent-pid PID "
                 "[--parent-fd FD] -m MODULE [ARGS...]")
    watch_parent(parent_pid, parent_fd)
    module = args[1]
    sys.argv = [module, *args[2:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
