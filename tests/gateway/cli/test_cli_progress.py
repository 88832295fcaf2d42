"""The live progress bar of long commands: drawn on a terminal (a real pseudo-terminal
here), never with ``--json`` or when stderr is a pipe.

A bar is recognised, in what the command wrote to the terminal, by its phase's name
followed on the same line by ``done/total``; rich hides the cursor while it draws
(``ESC[?25l``). (The bar's glyph alone proves nothing: the report's table is drawn with
it too.)
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from durable_queue import DurableQueue
from gateway.transports import LocalNamespace
from replication import Message
from tests.gateway.cli.cli_support import run_process

pytestmark = pytest.mark.usefixtures("dirs")

HIDE_CURSOR = "\x1b[?25l"


def bar(phase: str, total: int, text: str) -> bool:
    """Whether ``text`` shows a bar of ``phase`` counting to ``total``."""
    return re.search(rf"{re.escape(phase)} [^\n\r]*?━[^\n\r]*? \d+/{total}\b", text) is not None


def on_a_terminal(*args: str, cwd: Path, timeout: float = 120) -> tuple[int, str]:
    """``geogateway ARGS`` with stdin, stdout and stderr on a pseudo-terminal (120x40);
    (exit code, everything it wrote)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    env = {k: v for k, v in os.environ.items()
           if k not in ("NO_COLOR", "FORCE_COLOR", "TTY_INTERACTIVE", "TTY_COMPATIBLE",
                        "COLUMNS", "LINES", "CI")}
    env.update(TERM="xterm-256color", PYTHONWARNINGS="error")
    proc = subprocess.Popen([sys.executable, "-m", "gateway.cli", *args], stdin=slave,
                            stdout=slave, stderr=slave, cwd=cwd, env=env, close_fds=True)
    os.close(slave)
    chunks = []
    deadline = time.monotonic() + timeout
    try:
        while True:  # read as it comes, so a full terminal buffer never blocks the child
            assert time.monotonic() < deadline, "the command did not end"
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        code = proc.wait(timeout=30)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return code, b"".join(chunks).decode("utf-8", "replace")


def test_a_drill_draws_its_bars_on_a_terminal(tmp_path: Path) -> None:
    code, text = on_a_terminal("drill", "--messages", "300", cwd=tmp_path)
    assert code == 0, text
    assert HIDE_CURSOR in text
    assert bar("sent", 300, text) and bar("delivered", 300, text)
    assert "geogateway failover drill" in text  # the report follows the bars


def test_a_drill_draws_no_bar_with_json_or_off_a_terminal(tmp_path: Path) -> None:
    code, text = on_a_terminal("drill", "--messages", "300", "--json", "-", cwd=tmp_path)
    assert code == 0, text
    assert not bar("sent", 300, text) and HIDE_CURSOR not in text
    assert '"passed": true' in text
    code, out, err = run_process("drill", "--messages", "300", cwd=tmp_path)
    assert code == 0, err
    assert not bar("sent", 300, out + err) and "\x1b[" not in out + err


@pytest.fixture
def filled_queue(dirs: dict[str, Path]) -> Path:
    """3,000 messages buffered for whichever of two local namespaces comes back."""
    for name in ("primary", "secondary"):
        with LocalNamespace(name, data_dir=dirs["data"]) as ns:
            ns.create_queue("orders")
    path = dirs["tmp"] / "buffer.db"
    with DurableQueue(path) as q:
        q.put_many("*/orders", [Message(b"x" * 100) for _ in range(3_000)])
    return path


def test_queue_replay_draws_its_bar_on_a_terminal(filled_queue: Path,
                                                  dirs: dict[str, Path]) -> None:
    code, text = on_a_terminal("queue", "replay", "-q", str(filled_queue), cwd=dirs["tmp"])
    assert code == 0, text
    assert HIDE_CURSOR in text and bar("replaying */orders", 3000, text)
    assert "3000" in text.rsplit("replay", 1)[-1]  # the report's table, after the bar


def test_queue_replay_draws_no_bar_with_json(filled_queue: Path, dirs: dict[str, Path]) -> None:
    code, text = on_a_terminal("queue", "replay", "-q", str(filled_queue), "--json",
                               cwd=dirs["tmp"])
    assert code == 0, text
    assert not bar("replaying */orders", 3000, text) and HIDE_CURSOR not in text
    assert '"replayed": 3000' in text


def test_send_count_draws_its_bar_on_a_terminal_only(dirs: dict[str, Path]) -> None:
    code, text = on_a_terminal("send", "-e", "orders", "--count", "150", cwd=dirs["tmp"])
    assert code == 0, text
    assert bar("sending", 150, text) and "sent 150 messages" in text
    code, out, err = run_process("send", "-e", "orders", "--count", "150", cwd=dirs["tmp"])
    assert code == 0, err
    assert not bar("sending", 150, out + err) and "sent 150 messages" in out
