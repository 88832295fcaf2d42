"""What the status tests share: a gateway's configuration on local namespaces, the real
``geogateway serve`` process, and a uvicorn server in a thread for a mounted app."""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.transports import LocalNamespace

ENTITY = "orders"


def make_gateway(paths: dict[str, Path], *, create: bool = True, extra: str = "",
                 primary: str = "local://primary") -> Path:
    """A config file for ``orders`` on ``primary`` and ``local://secondary`` (local
    namespaces in ``paths['data']``), with a durable queue ``buffer.db`` beside it; the
    local namespaces' files made with ``create``."""
    if create:
        for name in ("primary", "secondary"):
            with LocalNamespace(name, data_dir=paths["data"]) as ns:
                ns.create_queue(ENTITY)
    config = paths["tmp"] / "gateway.toml"
    config.write_text(
        f'entity = "{ENTITY}"\nprimary = "{primary}"\nsecondary = "local://secondary"\n'
        f'data_dir = "{paths["data"]}"\nstate_dir = "{paths["state"]}"\n'
        f"{extra}"
        f'[durable_queue]\npath = "{paths["tmp"] / "buffer.db"}"\n')
    return config


@dataclass
class Served:
    """A running ``geogateway serve``: its address and process."""

    url: str
    process: subprocess.Popen[str]


@contextlib.contextmanager
def serve_process(*args: str, cwd: Path, within: float = 60.0) -> Iterator[Served]:
    """``geogateway serve ARGS --port 0`` as a child process; yields once it listens
    (it prints its address), and stops it with SIGTERM, checking it ends cleanly."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "serve", "--port", "0", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
        cwd=cwd, env={**os.environ, "PYTHONWARNINGS": "error"})
    try:
        line = _first_line(proc, within)
        assert line.startswith("serving http://127.0.0.1:"), line
        yield Served(url=line.split()[1], process=proc)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        assert "Traceback" not in err, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def _first_line(proc: subprocess.Popen[str], within: float) -> str:
    assert proc.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if selector.select(timeout=0.1):
            line = proc.stdout.readline()
            if line:
                return line.strip()
        if proc.poll() is not None:
            raise AssertionError(f"serve exited {proc.returncode}: {proc.stderr.read()}")  # type: ignore[union-attr]
    raise AssertionError(f"serve did not print its address within {within} s")


@contextlib.contextmanager
def uvicorn_thread(app: Any) -> Iterator[str]:
    """A real uvicorn server for ``app`` on a free port of 127.0.0.1, in a thread."""
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.01)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()
