"""``geogateway postgres start|status|stop`` on a real embedded server."""

from __future__ import annotations

import json
import os
import stat
import tempfile
from pathlib import Path

import psycopg


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
