"""``geogateway emulator --hybrid-connection NAME``: the relay served beside the namespaces,
obeying ``geogateway namespace down``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from gateway.relay import RelayEndpoint
from tests.gateway.cli.cli_support import Run, expect_one_line_error, run_process


def get(ep: RelayEndpoint) -> httpx.Response:
    return httpx.get(ep.http_url(), headers={"ServiceBusAuthorization": ep.token()}, timeout=5)


def test_relay_ready_line_then_down_and_up_by_the_cli(dirs: dict[str, Path]) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "emulator", "--json", "-n", "primary=0",
         "-n", "secondary=0", "--hybrid-connection", "orders"], cwd=dirs["tmp"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONWARNINGS": "error"})
    try:
        assert proc.stdout is not None
        relay = json.loads(proc.stdout.readline())["relay"]
        assert set(relay) == {"primary", "secondary"}
        assert relay["primary"]["hybrid_connections"] == ["orders"]
        ep = RelayEndpoint.from_connection_string(relay["primary"]["connection_string"],
                                                  path="orders")
        assert get(ep).status_code == 502  # no listener yet
        assert run_process("namespace", "down", "primary", cwd=dirs["tmp"])[0] == 0
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                get(ep)
            except httpx.ConnectError:
                break
            except (httpx.ReadError, httpx.RemoteProtocolError):
                pass  # a request the namespace cut as it went down: look again
            time.sleep(0.05)
        else:
            pytest.fail("the relay still serves a namespace that is down")
        assert run_process("namespace", "up", "primary", cwd=dirs["tmp"])[0] == 0
        while time.monotonic() < deadline + 10:
            try:
                assert get(ep).status_code == 502
                break
            except (httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError):
                time.sleep(0.05)
        else:
            pytest.fail("the relay did not come back up")
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err


def test_bad_relay_options_are_one_line_errors(dirs: dict[str, Path], run: Run) -> None:
    for bad in ("a/b", "a b", "$hc", ""):
        expect_one_line_error(run("emulator", "-n", "primary=0", "--hybrid-connection", bad),
                              2, "hybrid connection")
    expect_one_line_error(run("emulator", "-n", "primary=0", "--relay-port", "nope=0",
                              "--hybrid-connection", "orders"), 2, "unknown namespace")
    expect_one_line_error(run("emulator", "-n", "primary=0", "--relay-port", "primary=0"), 2,
                          "--hybrid-connection")
