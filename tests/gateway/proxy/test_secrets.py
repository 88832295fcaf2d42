"""No key reaches a log line or a report: not the proxy's own (which its clients sign
with), not the namespaces' behind it, in any form a connection string or a SAS token
carries it, even with every debug line on (``-vvv``: the Azure SDKs' too)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest
from azure.servicebus import ServiceBusMessage

from gateway.emulator import Emulator, EmulatorThread
from gateway.transports import LocalNamespace
from tests.gateway.cli.cli_support import clean_env
from tests.gateway.proxy.conftest import QUEUE, client

# Base64 keys, as Azure makes them, whose encodings differ from the key: "+", "/" and "="
# are escaped in a URL, and the decoded bytes are text that could be logged as such.
PROXY_KEY = base64.b64encode(b"proxy drill key??>???!").decode()
NAMESPACE_KEY = base64.b64encode(b"namespaces key:??>???!").decode()
# Runs ``geogateway ARGS`` with the proxy's key (random otherwise) made PROXY_KEY.
_WITH_KNOWN_KEY = (
    "import os, sys, types\n"
    "import gateway.proxy._proxy as proxy\n"
    "proxy.secrets = types.SimpleNamespace(token_urlsafe=lambda n=None: "
    "os.environ['TEST_PROXY_KEY'])\n"
    "from gateway.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


def forms(key: str) -> set[str]:
    """The key as written, URL-encoded (a SAS token's or URL's form), base64-encoded
    again, and decoded (the bytes a signature is made with, as text)."""
    assert {"+", "/", "="} <= set(key), "the key must have characters that are escaped"
    return {key, quote_plus(key), quote(key, safe=""),
            base64.b64encode(key.encode()).decode(),
            base64.b64decode(key).decode()}


def assert_no_secret(text: str, key: str) -> None:
    for form in forms(key):
        assert form not in text, form
    # Nor a SAS token's signature, whoever signed it.
    assert not re.search(r"(?i)sig(=|%3D)(?!\*\*\*)", text)


@pytest.fixture
def dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    return clean_env(monkeypatch, tmp_path)


@pytest.mark.parametrize("mode", ["passive", "active"])
def test_a_proxy_drill_logs_and_reports_no_key(dirs: dict[str, Path], mode: str) -> None:
    # Given the proxy drill (a client signing with the proxy's key, the primary down
    # midway), with every log line on and its report as JSON on stdout
    proc = subprocess.run(
        [sys.executable, "-c", _WITH_KNOWN_KEY, "-vvv", "drill", "--transport", "proxy",
         "--mode", mode, "--messages", "30", "--batch", "5", "--json", "-",
         "--data-dir", str(dirs["tmp"] / "drills")],
        capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120,
        cwd=dirs["tmp"], env={**os.environ, "TEST_PROXY_KEY": PROXY_KEY})
    # When it passes (the client signed in with that key)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert (report["sent"], report["lost"], report["transport"]) == (30, 0, "proxy")
    # Then the key is in no line of its output, the debug lines included
    assert "DEBUG" in proc.stderr and "azure." in proc.stderr
    assert_no_secret(proc.stdout + proc.stderr, PROXY_KEY)


def test_the_namespaces_keys_are_in_no_line_of_a_proxy(dirs: dict[str, Path]) -> None:
    # Given two emulated namespaces whose key is known, and a proxy in front of them
    # (started with -vvv) whose geo sender and receivers sign with that key
    emulator = Emulator({"primary": 0, "secondary": 0}, data_dir=dirs["data"],
                        queues=[QUEUE], key=NAMESPACE_KEY)
    with EmulatorThread(emulator) as emu:
        config = dirs["tmp"] / "gateway.toml"
        config.write_text(f'primary = "{emu.connection_string("primary")}"\n'
                          f'secondary = "{emu.connection_string("secondary")}"\n'
                          f'entity = "{QUEUE}"\n'
                          f'[durable_queue]\npath = "{dirs["tmp"] / "buffer.db"}"\n')
        proc = subprocess.Popen(
            [sys.executable, "-m", "gateway.cli", "-vvv", "proxy", "--config", str(config),
             "--json"], cwd=dirs["tmp"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONWARNINGS": "error"})
        try:
            assert proc.stdout is not None
            ready = proc.stdout.readline()
            # When a client sends through it, the primary goes down, and it sends and
            # receives again
            got = asyncio.run(_traffic(json.loads(ready)["connection_string"], dirs["data"]))
        finally:
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err[-3000:]
    assert sorted(got) == [f"m{i}" for i in range(6)]
    # Then no line of the proxy's (the SDK's debug lines included) holds their key
    assert "DEBUG" in err and "azure." in err
    assert_no_secret(ready + out + err, NAMESPACE_KEY)


async def _traffic(conn_str: str, data_dir: Path) -> list[str]:
    got: list[str] = []
    async with client(conn_str) as c:
        async with c.get_queue_sender(QUEUE, keep_alive=None) as sender:
            for i in range(3):
                await sender.send_messages(ServiceBusMessage(f"m{i}", message_id=f"m{i}"))
            LocalNamespace("primary", data_dir=data_dir).down()
            await asyncio.sleep(0.3)  # the emulator looks at its control file every 0.1 s
            for i in range(3, 6):
                await sender.send_messages(ServiceBusMessage(f"m{i}", message_id=f"m{i}"))
        LocalNamespace("primary", data_dir=data_dir).up()
        async with c.get_queue_receiver(QUEUE, max_wait_time=1) as receiver:
            deadline = asyncio.get_running_loop().time() + 15
            while len(got) < 6 and asyncio.get_running_loop().time() < deadline:
                for m in await receiver.receive_messages(max_message_count=10,
                                                         max_wait_time=0.5):
                    got.append(str(m.message_id))
                    await receiver.complete_message(m)
    return got
