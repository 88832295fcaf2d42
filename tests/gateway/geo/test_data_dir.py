"""The data directory of the local namespaces: a missing or read-only one is a
ConfigError at construction, never an "outage" of both namespaces that buffers
every message.

A read-only directory is made for real: chmod for a normal user; for root (who may
write anywhere chmod says no) a read-only bind mount in a private mount namespace
(``unshare -m``) around the child process only.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gateway import ConfigError, GeoReceiver, GeoSender
from gateway.aio import AsyncGeoSender
from tests.gateway.cli.cli_support import Run, expect_one_line_error

ROOT = Path(__file__).resolve().parents[3]


pytestmark = pytest.mark.usefixtures("dirs")


def sender(data_dir: Path, state: Path) -> GeoSender:
    return GeoSender(primary="local://primary", secondary="local://secondary",
                     entity="orders", data_dir=data_dir, state_dir=state, recovery=False)


# -- missing ------------------------------------------------------------------------------


def test_a_data_dir_whose_parent_is_missing_is_a_config_error(dirs: dict[str, Path]) -> None:
    # Given a data directory under a directory that does not exist (a typo)
    data_dir = dirs["tmp"] / "nope" / "namespaces"
    # When a sender or a receiver is made on it / Then ConfigError names it, creates nothing
    with pytest.raises(ConfigError, match="does not exist") as info:
        sender(data_dir, dirs["state"])
    assert str(data_dir) in str(info.value)
    with pytest.raises(ConfigError, match="does not exist"):
        GeoReceiver(primary="local://primary", secondary="local://secondary",
                    entity="orders", data_dir=data_dir, dedup_store=dirs["tmp"] / "d.db")
    assert not (dirs["tmp"] / "nope").exists()


def test_a_missing_data_dir_under_an_existing_parent_is_created(dirs: dict[str, Path]) -> None:
    # Given a data directory that does not exist yet, in a directory that does
    data_dir = dirs["tmp"] / "fresh"
    # When a sender sends through it / Then it was created (0700) and the send landed
    with sender(data_dir, dirs["state"]) as s:
        result = s.send("hello")
    assert result.namespaces == ("primary",) and not result.buffered
    assert data_dir.is_dir() and (data_dir.stat().st_mode & 0o777) == 0o700


def test_a_data_dir_from_the_environment_is_checked_too(
    dirs: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GEOGATEWAY_DATA_DIR", str(dirs["tmp"] / "nope" / "deeper"))
    with pytest.raises(ConfigError, match="nope"):
        AsyncGeoSender(primary="local://primary", secondary="local://secondary",
                       entity="orders", state_dir=dirs["state"])


def test_a_file_as_data_dir_is_a_config_error(dirs: dict[str, Path]) -> None:
    a_file = dirs["tmp"] / "file"
    a_file.write_text("x")
    with pytest.raises(ConfigError, match="not a directory"):
        sender(a_file, dirs["state"])


def test_cli_send_to_a_data_dir_whose_parent_is_missing(run: Run, dirs: dict[str, Path]) -> None:
    data_dir = dirs["tmp"] / "nope" / "namespaces"
    result = run("send", "-e", "orders", "--data-dir", str(data_dir), "hello")
    expect_one_line_error(result, 1, str(data_dir), "does not exist")
    result = run("namespace", "down", "primary", "--data-dir", str(data_dir))
    expect_one_line_error(result, 1, str(data_dir))
    assert not (dirs["tmp"] / "nope").exists()


# -- read-only ----------------------------------------------------------------------------


def read_only_command(directory: Path, argv: list[str]) -> list[str]:
    """``argv`` run with ``directory`` read-only for it (see the module docstring)."""
    if os.geteuid() != 0:
        directory.chmod(0o555)
        return argv
    if shutil.which("unshare") is None:  # pragma: no cover - util-linux is on the machines
        pytest.skip("root without unshare cannot make a read-only directory")
    script = 'mount --bind "$1" "$1" && mount -o remount,ro,bind "$1" && shift && exec "$@"'
    return ["unshare", "-m", "sh", "-c", script, "sh", str(directory), *argv]


def run_read_only(directory: Path, argv: list[str], cwd: Path) -> tuple[int, str, str]:
    proc = subprocess.run(read_only_command(directory, argv), capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=60, cwd=cwd,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    if proc.returncode != 0 and "mount" in proc.stderr and "Traceback" not in proc.stderr:
        pytest.skip(f"cannot make a read-only mount here: {proc.stderr.strip()}")
    return proc.returncode, proc.stdout, proc.stderr


SENDER = """
import sys
from gateway import GeoSender, ConfigError
try:
    GeoSender(primary="local://primary", secondary="local://secondary", entity="orders",
              data_dir=sys.argv[1], state_dir=sys.argv[2], recovery=False)
except ConfigError as exc:
    print("ConfigError:", exc)
else:
    print("no error")
"""


def test_a_read_only_data_dir_is_a_config_error(dirs: dict[str, Path]) -> None:
    # Given a data directory the process cannot write
    data_dir = dirs["tmp"] / "ro"
    data_dir.mkdir()
    # When a sender is made on it / Then ConfigError names it (not a "namespace down"
    # that would buffer every message)
    code, out, err = run_read_only(
        data_dir, [sys.executable, "-c", SENDER, str(data_dir), str(dirs["state"])], dirs["tmp"])
    assert code == 0, err
    assert out.startswith("ConfigError:") and str(data_dir) in out and "read-only" in out


def test_cli_send_and_namespace_down_on_a_read_only_data_dir(dirs: dict[str, Path]) -> None:
    data_dir = dirs["tmp"] / "ro"
    data_dir.mkdir()
    for args in (["send", "-e", "orders", "hello"], ["namespace", "down", "primary"]):
        argv = [sys.executable, "-m", "gateway.cli", *args, "--data-dir", str(data_dir)]
        result = run_read_only(data_dir, argv, dirs["tmp"])
        expect_one_line_error(result, 1, str(data_dir), "read-only")
    assert list(data_dir.iterdir()) == []
