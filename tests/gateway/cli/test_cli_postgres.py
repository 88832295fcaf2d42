"""``geogateway postgres start|status|stop`` on a real embedded server."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import psycopg
import pytest

from gateway.stores import EmbeddedPostgres


def test_start_status_stop_keeps_the_password_in_a_private_file(run):
    # Given an empty directory
    data_dir = Path(tempfile.mkdtemp(prefix="geogateway-test-pg-")) / "server"
    try:
        # When the server is started
        code, out, err = run("postgres", "start", "--data-dir", str(data_dir), "--json")
        assert (code, err) == (0, "")
        started = json.loads(out)
        # Then the printed DSN hides the password, and the private file holds a working one
        dsn = (data_dir / "geogateway-dsn").read_text().strip()
        password = dsn.split("://")[1].split("@")[0].split(":")[1]
        assert "***" in started["dsn"] and password not in out
        assert stat.S_IMODE(os.stat(data_dir / "geogateway-dsn").st_mode) == 0o600
        with psycopg.connect(dsn) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        code, out, _ = run("postgres", "status", "--data-dir", str(data_dir), "--json")
        assert code == 0 and json.loads(out)["port"] == started["port"]
    finally:
        code, out, _ = run("postgres", "stop", "--data-dir", str(data_dir))
    # And once stopped, status says so with exit code 3
    assert code == 0 and out.strip() == "stopped"
    code, out, _ = run("postgres", "status", "--data-dir", str(data_dir))
    assert code == 3 and "not running" in out


def test_stop_without_a_server_says_so(run, tmp_path):
    code, out, err = run("postgres", "stop", "--data-dir", str(tmp_path / "none"))
    assert code == 0 and "was not running" in out and err == ""


# Run in a child interpreter that adopts orphans (PR_SET_CHILD_SUBREAPER), as PID 1 of a
# container or a service manager does: pg_ctl's server is then its child once pg_ctl
# exits, and it is the one that must reap the server when it stops.
ADOPTING_START_STOP = """
import ctypes, os, sys
from gateway.cli import main
assert ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0  # CHILD_SUBREAPER
data_dir = sys.argv[1]
assert main(["postgres", "start", "--data-dir", data_dir]) == 0
assert main(["postgres", "stop", "--data-dir", data_dir]) == 0
zombies = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        stat = open(f"/proc/{pid}/stat").read()
    except OSError:
        continue
    state, ppid = stat[stat.rindex(")") + 2:].split()[:2]
    if state == "Z" and int(ppid) == os.getpid():
        zombies.append(stat[: stat.rindex(")") + 1])
print(zombies)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl and /proc: Linux")
def test_stop_reaps_the_server_when_this_process_adopted_it(tmp_path):
    # Given a process that adopts orphans, and a server it started with `postgres start`
    data_dir = Path(tempfile.mkdtemp(prefix="geogateway-test-pg-")) / "server"
    try:
        # When `postgres stop` runs in the same process
        proc = subprocess.run([sys.executable, "-c", ADOPTING_START_STOP, str(data_dir)],
                              capture_output=True, text=True, timeout=120)
    finally:
        EmbeddedPostgres(data_dir).cleanup()
    # Then the server's process was reaped: no zombie child is left behind
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]", proc.stdout
