"""``geogateway proxy``: the ready line, sends through it, a clean stop on SIGTERM."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusMessage
from azure.servicebus.exceptions import ServiceBusAuthorizationError

from tests.gateway.cli.cli_support import clean_env
from tests.gateway.proxy.conftest import QUEUE, client, drain_local


@pytest.fixture
def dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    return clean_env(monkeypatch, tmp_path)


def start(*args: str, cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "proxy", *args], cwd=cwd,
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONWARNINGS": "error"})


def write_config(dirs: dict[str, Path]) -> Path:
    config = dirs["tmp"] / "gateway.toml"
    config.write_text('primary = "local://primary"\nsecondary = "local://secondary"\n'
                      f'entity = "{QUEUE}"\n')
    return config


async def send(conn_str: str, *ids: str) -> None:
    async with client(conn_str) as c, c.get_queue_sender(QUEUE, keep_alive=None) as sender:
        await sender.send_messages([ServiceBusMessage(i, message_id=i) for i in ids])


def test_json_ready_line_sends_through_it_then_a_clean_stop(dirs: dict[str, Path]) -> None:
    # Given the proxy started with a geo configuration, on a free port
    proc = start("--config", str(write_config(dirs)), "--json", cwd=dirs["tmp"])
    try:
        assert proc.stdout is not None
        # When it is ready, it says so in one JSON line
        ready = json.loads(proc.stdout.readline())
        port = ready["port"]
        assert ready["connection_string"].startswith(f"Endpoint=sb://127.0.0.1:{port};")
        # Then a client sends through it with that connection string
        asyncio.run(send(ready["connection_string"], "a", "b"))
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    # and SIGTERM stops it cleanly
    assert proc.returncode == 0, err
    assert asyncio.run(drain_local(dirs["data"], "primary")) == ["a", "b"]


def test_a_non_loopback_address_needs_insecure(dirs: dict[str, Path]) -> None:
    proc = start("--config", str(write_config(dirs)), "--listen", "0.0.0.0:0", cwd=dirs["tmp"])
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 2
    assert "--insecure" in err and "TLS" in err and out == ""


def test_a_missing_tls_key_is_one_line(dirs: dict[str, Path]) -> None:
    cert = dirs["tmp"] / "proxy.crt"
    cert.write_text("not a certificate")
    proc = start("--config", str(write_config(dirs)), "--tls-cert", str(cert),
                 "--tls-key", str(dirs["tmp"] / "absent.key"), cwd=dirs["tmp"])
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 2 and out == ""
    assert "cannot read the TLS key" in err and len(err.strip().splitlines()) == 1, err


def test_a_policy_on_the_command_line_signs_with_its_rights(dirs: dict[str, Path]) -> None:
    # Given the proxy started with a listen-only policy besides its own key
    key = "cmVhZGVyIGtleQ=="
    proc = start("--config", str(write_config(dirs)), "--json", "--policy",
                 f"reader={key}:Listen", cwd=dirs["tmp"])
    try:
        assert proc.stdout is not None
        ready = json.loads(proc.stdout.readline())
        endpoint = ready["connection_string"].split(";")[0]
        reader = (f"{endpoint};SharedAccessKeyName=reader;SharedAccessKey={key};"
                  "UseDevelopmentEmulator=true")
        # When a client signs with it and sends, then its token is good but lacks Send
        with pytest.raises(ServiceBusAuthorizationError, match="'Send' claim"):
            asyncio.run(send(reader, "a"))
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert key not in err


def test_a_malformed_policy_is_a_usage_error(dirs: dict[str, Path]) -> None:
    proc = start("--config", str(write_config(dirs)), "--policy", "reader:Listen",
                 cwd=dirs["tmp"])
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 2
    assert "bad policy" in err and out == ""


def test_a_negative_session_gap_timeout_is_a_usage_error(dirs: dict[str, Path]) -> None:
    proc = start("--config", str(write_config(dirs)), "--session-gap-timeout", "-1",
                 cwd=dirs["tmp"])
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 2
    assert "--session-gap-timeout" in err and "Traceback" not in err and out == ""
