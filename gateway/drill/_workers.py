"""Worker processes of the multi-process drills: start, wait for ``ready``, signal, stop.

A worker is ``python -m MODULE ARGS...`` run through
:func:`gateway._support.parent_watch.child_command` (it stops by itself should the drill
die), with its stderr in ``ROOT/logs/NAME.log``. It prints ``ready`` on stdout once it
can take a SIGTERM gracefully; :meth:`Workers.start` waits for that line.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from pathlib import Path
from typing import Any

from gateway._support.parent_watch import child_command

__all__ = ["PROJECT", "Workers", "send_while_watching"]

logger = logging.getLogger("geogateway.drill")

#: The directory that holds the gateway package, for the workers' PYTHONPATH.
PROJECT = str(Path(__file__).resolve().parents[2])
_READY_TIMEOUT = 30.0


class Workers:
    """The named worker processes of one drill run in ``root``.

    Args:
        root: the drill's state folder (logs go to ``root/logs``).
        stop_timeout: seconds a worker has to exit after SIGTERM before it is killed.
    """

    def __init__(self, root: Path, *, stop_timeout: float) -> None:
        self.root = root
        self.stop_timeout = stop_timeout
        self.processes: dict[str, asyncio.subprocess.Process] = {}
        self.killed: set[str] = set()
        (root / "logs").mkdir(exist_ok=True)

    def log(self, name: str) -> Path:
        return self.root / "logs" / f"{name}.log"

    async def start(self, name: str, python_args: Sequence[str],
                    env: Mapping[str, str] = {}) -> None:
        """Start worker ``name`` (``python_args`` = ``["-m", MODULE, ...]``) and wait
        until it prints ``ready``.

        Raises:
            RuntimeError: it exited or did not get ready within 30 s (see its log).
        """
        environment = dict(os.environ)
        environment["PYTHONPATH"] = os.pathsep.join(
            p for p in (PROJECT, environment.get("PYTHONPATH", "")) if p)
        environment.update(env)
        log = await asyncio.to_thread(open, self.log(name), "ab")
        command, fds = child_command(list(python_args))
        with log:
            process = await asyncio.create_subprocess_exec(
                *command, stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=log, env=environment, pass_fds=fds,
            )
        self.processes[name] = process
        assert process.stdout is not None
        try:
            line = await asyncio.wait_for(process.stdout.readline(), _READY_TIMEOUT)
        except asyncio.TimeoutError:
            line = b""
        if line.strip() != b"ready":
            raise RuntimeError(f"drill worker {name} did not start; see {self.log(name)}")

    def running(self, name: str) -> bool:
        process = self.processes.get(name)
        return process is not None and process.returncode is None

    def kill(self, name: str) -> None:
        """SIGKILL ``name`` (if it runs): no graceful stop, as in a crash."""
        if self.running(name):
            self.processes[name].send_signal(signal.SIGKILL)
            self.killed.add(name)

    def terminate(self, name: str) -> None:
        """SIGTERM ``name`` (if it runs): its graceful stop."""
        if self.running(name):
            self.processes[name].send_signal(signal.SIGTERM)

    async def wait(self, name: str) -> int | None:
        """Wait for ``name`` to exit (up to the stop timeout); its exit code."""
        process = self.processes[name]
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(process.wait(), self.stop_timeout)
        return process.returncode

    async def stop_all(self) -> None:
        """SIGTERM every worker, wait, kill those still running; log odd exits."""
        for process in self.processes.values():
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signal.SIGTERM)
        for name, process in self.processes.items():
            try:
                await asyncio.wait_for(process.wait(), self.stop_timeout)
            except asyncio.TimeoutError:
                logger.warning("drill worker %s did not stop in %s s: killed; see %s", name,
                               self.stop_timeout, self.log(name))
                process.kill()
                await process.wait()
            if process.returncode not in (0, -signal.SIGKILL) or (
                    process.returncode == -signal.SIGKILL and name not in self.killed):
                logger.warning("drill worker %s exited with %s; see %s", name,
                               process.returncode, self.log(name))


async def send_while_watching(
    watch: Callable[[], Coroutine[Any, Any, None]], send: Callable[[], Awaitable[None]],
    settle: Callable[[asyncio.Task[None]], Awaitable[None]],
) -> None:
    """Run ``watch()`` (the drill's script and progress) as a task while ``send()`` and
    then ``settle(watching)`` run; cancel it afterwards, whatever happened."""
    watching = asyncio.create_task(watch())
    try:
        await send()
        await settle(watching)
    finally:
        watching.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watching
