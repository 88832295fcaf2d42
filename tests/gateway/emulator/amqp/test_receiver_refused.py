"""A namespace that refuses to be read for good (a wrong key) is reported, never hidden:
the receiver logs it, calls ``on_namespace_down`` and keeps the other namespace; both
refused raise. The CLI warns and exits non-zero. Real SDKs against the emulator."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway import GeoReceiver, MessageRejected, NamespaceMisconfigured
from gateway.aio import AsyncGeoReceiver, AsyncGeoSender
from gateway.emulator import Emulator
from replication import Message
from tests.gateway.cli.cli_support import clean_env, run_process
from tests.gateway.conftest import Recorder, wait_for
from tests.gateway.emulator.conftest import QUEUE

pytestmark = pytest.mark.anyio

WRONG_KEY = "d3Jvbmcga2V5IGZvciB0aGlzIG5hbWVzcGFjZQ=="


def wrong_key(conn_str: str) -> str:
    key = conn_str.split("SharedAccessKey=")[1].split(";")[0]
    return conn_str.replace(key, WRONG_KEY)


def host(conn_str: str) -> str:
    return conn_str.split("sb://")[1].split(";")[0].rstrip("/")


async def send_to_primary(emulator: Emulator, tmp_path: Path, *bodies: str) -> None:
    async with AsyncGeoSender(
        primary=emulator.connection_string("primary"),
        secondary=emulator.connection_string("secondary"), entity=QUEUE,
        recovery=False, state_dir=tmp_path / "state",
    ) as sender:
        for body in bodies:
            await sender.send(Message(body))


async def test_a_namespace_with_a_wrong_key_is_reported_and_the_other_read(
        emulator: Emulator, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # Given a message on the primary, and the secondary's connection string with a wrong key
    await send_to_primary(emulator, tmp_path, "hello")
    bad = wrong_key(emulator.connection_string("secondary"))
    hooks = Recorder()
    caplog.set_level(logging.INFO)
    async with AsyncGeoReceiver(
        primary=emulator.connection_string("primary"), secondary=bad, entity=QUEUE,
        dedup_store=tmp_path / "dedup.db", hooks=hooks,
    ) as receiver:
        # When it receives
        got = await receiver.receive(max_wait=5)
        assert [m.body for m in got] == [b"hello"]
        await receiver.complete(got[0])
        # Then the secondary is reported refused: the hook, the property, a log line
        await wait_for(lambda: bool(receiver.refused), within=15)
        assert set(receiver.refused) == {host(bad)}
        assert host(bad) in receiver.down
        downs = hooks.named("on_namespace_down")
        assert [d["namespace"] for d in downs] == [host(bad)]
        # (a wrong key makes the namespace unusable: what to check is in the error)
        assert isinstance(downs[0]["error"], NamespaceMisconfigured)
        assert "check the key" in str(downs[0]["error"])
        # And the receiver goes on with the primary (no exception)
        await send_to_primary(emulator, tmp_path, "again")
        got = await receiver.receive(max_wait=5)
        assert [m.body for m in got] == [b"again"]
        await receiver.complete(got[0])
    ours = [r for r in caplog.records if r.name == "geogateway" and r.levelno >= logging.WARNING]
    assert any(host(bad) in r.getMessage() and "refused" in r.getMessage() for r in ours), ours
    assert WRONG_KEY not in caplog.text and WRONG_KEY[:12] not in caplog.text


async def test_both_namespaces_refused_raise_to_the_caller(
        emulator: Emulator, tmp_path: Path) -> None:
    # Given both connection strings with a wrong key
    hooks = Recorder()
    async with AsyncGeoReceiver(
        primary=wrong_key(emulator.connection_string("primary")),
        secondary=wrong_key(emulator.connection_string("secondary")), entity=QUEUE,
        dedup_store=tmp_path / "dedup.db", hooks=hooks,
    ) as receiver:
        # When it receives / Then MessageRejected reaches the caller, naming both
        with pytest.raises(MessageRejected) as caught:
            for _ in range(10):
                await receiver.receive(max_wait=2)
        assert len(hooks.named("on_namespace_down")) == 2
        assert WRONG_KEY not in str(caught.value)
        for conn_str in (emulator.connection_string("primary"),
                         emulator.connection_string("secondary")):
            assert host(conn_str) in str(caught.value)


# -- the CLI, in processes ------------------------------------------------------------

@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """``geogateway emulator`` in a process; the connection strings of its namespaces."""
    clean_env(monkeypatch, tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "emulator", "--json", "-n", "primary=0",
         "-n", "secondary=0", "--queue", QUEUE], cwd=tmp_path,
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "GEOGATEWAY_DATA_DIR": str(tmp_path / "emulated")})
    assert proc.stdout is not None
    ready = json.loads(proc.stdout.readline())["namespaces"]
    try:
        yield {name: ns["connection_string"] for name, ns in ready.items()}
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=20)


def test_cli_receive_warns_and_exits_3_when_one_namespace_refuses(
        served: dict[str, str], tmp_path: Path) -> None:
    # Given a message on the primary, and a wrong key for the secondary
    good, bad = served["primary"], wrong_key(served["secondary"])
    code, _, err = run_process("send", "-e", QUEUE, "--primary", good, "--secondary",
                               served["secondary"], "hello", cwd=tmp_path)
    assert code == 0, err
    # When the messages are received
    code, out, err = run_process("receive", "-e", QUEUE, "--json", "--primary", good,
                                 "--secondary", bad, cwd=tmp_path)
    # Then the primary's message is printed, one warning line names the secondary,
    # and the exit code says a namespace could not be read
    assert code == 3, (code, out, err)
    assert [r["body"] for r in json.loads(out)] == ["hello"]
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("warning: "), err
    assert host(bad) in lines[0] and "could not be read" in lines[0]
    assert WRONG_KEY not in err and "Traceback" not in err


def test_cli_receive_exits_1_when_both_namespaces_refuse(
        served: dict[str, str], tmp_path: Path) -> None:
    code, out, err = run_process(
        "receive", "-e", QUEUE, "--primary", wrong_key(served["primary"]),
        "--secondary", wrong_key(served["secondary"]), cwd=tmp_path)
    assert code == 1, (code, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "refused" in lines[0] and WRONG_KEY not in err


def test_cli_send_with_a_wrong_key_fails_over_and_says_so(
        served: dict[str, str], tmp_path: Path) -> None:
    # Given a wrong key for the primary: the namespace is unusable, not the message
    code, out, err = run_process(
        "send", "-e", QUEUE, "--primary", wrong_key(served["primary"]),
        "--secondary", served["secondary"], "hello", cwd=tmp_path)
    # Then it went to the secondary; stderr says so and what to check about the primary
    assert code == 0, (code, out, err)
    lines = err.strip().splitlines()
    assert any("check the key" in line and host(served["primary"]) in line
               for line in lines), err
    assert sum(f"not to {host(served['primary'])} as asked" in line for line in lines) == 1
    assert WRONG_KEY not in err and "Traceback" not in err


def test_sync_receiver_reports_the_refused_namespace(
        served: dict[str, str], tmp_path: Path) -> None:
    # Given a wrong key for the secondary
    bad = wrong_key(served["secondary"])
    hooks = Recorder()
    with GeoReceiver(primary=served["primary"], secondary=bad, entity=QUEUE,
                     dedup_store=tmp_path / "dedup.db", hooks=hooks) as receiver:
        # When it receives until the secondary answered
        deadline = time.monotonic() + 15
        while not receiver.refused and time.monotonic() < deadline:
            assert receiver.receive(max_wait=0.5) == []
        # Then the secondary is reported, and receiving goes on
        assert set(receiver.refused) == {host(bad)} and host(bad) in receiver.down
        assert [d["namespace"] for d in hooks.named("on_namespace_down")] == [host(bad)]
        assert receiver.receive(max_wait=0.2) == []
