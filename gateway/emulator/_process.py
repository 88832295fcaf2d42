"""Run ``geogateway emulator`` as a child process, for drills and benchmarks.

The emulator runs in its own process (its own interpreter and GIL, as a real
namespace would be elsewhere); :class:`EmulatorProcess` starts it on free ports over
the local namespaces in ``data_dir``, reads its JSON ready line, and stops it with
SIGTERM on exit; should this process be killed instead, the child stops by itself
(:mod:`gateway._support.parent_watch`). Outages are injected as for the local namespaces
(``LocalNamespace.down()``): the emulator watches the same control files.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType

from gateway._support.parent_watch import child_command
from replication import ConfigError

__all__ = ["EmulatorProcess"]

_READY_TIMEOUT = 30.0
_STOP_TIMEOUT = 10.0
# The directory that holds the gateway package, for the child's PYTHONPATH.
_PROJECT = str(Path(__file__).resolve().parents[2])


class EmulatorProcess:
    """``geogateway emulator`` in a child process, serving ``namespaces`` on free ports.

    Args:
        namespaces: the names to serve.
        data_dir: the local namespaces' data directory.
        queues: queues to declare in each namespace: names, or name → settings
            (``lock_duration``, ``max_delivery_count``, ``max_message_size``,
            ``requires_session``).
        event_hubs: event hubs to declare (name → partitions).
        log: where the child's stderr goes (default: discarded).
    """

    def __init__(self, namespaces: Iterable[str], *, data_dir: str | os.PathLike[str],
                 queues: Iterable[str] | Mapping[str, Mapping[str, float | bool]] = (),
                 event_hubs: Mapping[str, int] | None = None,
                 log: str | os.PathLike[str] | None = None) -> None:
        self.namespaces = tuple(namespaces)
        self.data_dir = Path(data_dir)
        self.queues: dict[str, Mapping[str, float | bool]] = (
            dict(queues) if isinstance(queues, Mapping) else {q: {} for q in queues})
        self.event_hubs = dict(event_hubs or {})
        self.log = Path(log) if log is not None else None
        self.process: asyncio.subprocess.Process | None = None
        self._strings: dict[str, str] = {}
        self._ports: dict[str, int] = {}
        #: The certificate of the administration API's HTTPS (None: no API), once started.
        self.certificate: str | None = None

    def connection_string(self, namespace: str) -> str:
        """The namespace's connection string (with the well-known development key)."""
        return self._strings[namespace]

    def port(self, namespace: str) -> int:
        return self._ports[namespace]

    @property
    def pid(self) -> int:
        if self.process is None:
            raise RuntimeError("the emulator is not running")
        return self.process.pid

    async def __aenter__(self) -> EmulatorProcess:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.stop()

    async def start(self) -> None:
        """Start the child and wait for its ready line.

        Raises:
            ConfigError: it exited or did not get ready in time (its last error
                line is in the message).
        """
        args = ["-m", "gateway.cli", "emulator", "--json", "--data-dir", str(self.data_dir)]
        for name in self.namespaces:
            args += ["--namespace", f"{name}=0"]
        lines = []
        for queue, settings in self.queues.items():
            lines += ["[[queue]]", f"name = {json.dumps(queue)}",
                      *(f"{k} = {json.dumps(v)}" for k, v in settings.items()), ""]
        if lines:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            config = self.data_dir / "emulator.toml"
            config.write_text("\n".join(lines))
            args += ["--config", str(config)]
        for hub, partitions in self.event_hubs.items():
            args += ["--event-hub", f"{hub}:{partitions}"]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            p for p in (_PROJECT, os.environ.get("PYTHONPATH", "")) if p)}
        command, fds = child_command(args)  # it ends with this process, even if killed
        stderr = self.log.open("ab") if self.log is not None else None
        try:
            self.process = await asyncio.create_subprocess_exec(
                *command, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=stderr if stderr is not None else asyncio.subprocess.DEVNULL, env=env,
                pass_fds=fds)
        finally:
            if stderr is not None:
                stderr.close()
        assert self.process.stdout is not None
        try:
            line = await asyncio.wait_for(self.process.stdout.readline(), _READY_TIMEOUT)
        except asyncio.TimeoutError:
            line = b""
        try:
            report = json.loads(line)
            ready = report["namespaces"]
            self.certificate = report.get("certificate")
            self._strings = {n: ready[n]["connection_string"] for n in self.namespaces}
            self._ports = {n: int(ready[n]["port"]) for n in self.namespaces}
        except (ValueError, KeyError, TypeError):
            await self.stop()
            where = f"; see {self.log}" if self.log is not None else ""
            raise ConfigError(f"the emulator did not start{where}") from None

    async def stop(self) -> None:
        """SIGTERM the child and wait for it (SIGKILL after a while). Safe to call twice."""
        process, self.process = self.process, None
        if process is None or process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), _STOP_TIMEOUT)
        except asyncio.TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
