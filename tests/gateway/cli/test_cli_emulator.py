"""``geogateway emulator``: ready lines, configuration, errors, shutdown."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.emulator import DEFAULT_KEY, load_config, parse_event_hub
from gateway.emulator._config import parse_namespace
from gateway.transports import LocalNamespace
from replication import ConfigError
from tests.gateway.cli.cli_support import Run, expect_one_line_error


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def start(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "emulator", *args], cwd=cwd,
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONWARNINGS": "error", **(env or {})})


def stop(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=20)
    return proc.returncode, out, err


def test_json_ready_line_then_a_clean_stop(dirs: dict[str, Path]) -> None:
    config = dirs["tmp"] / "emulator.toml"
    config.write_text('[[queue]]\nname = "orders"\nlock_duration = 5.0\n\n'
                      '[[queue]]\nname = "flows"\nrequires_session = true\n\n'
                      '[[event_hub]]\nname = "hub"\npartitions = 2\n')
    proc = start("--json", "-n", "primary=0", "-n", "secondary=0", "--config", str(config),
                 "-e", "more:3", "--session-queue", "steps", cwd=dirs["tmp"])
    assert proc.stdout is not None
    ready = json.loads(proc.stdout.readline())["namespaces"]
    assert set(ready) == {"primary", "secondary"}
    port = ready["primary"]["port"]
    assert ready["primary"]["connection_string"] == (
        f"Endpoint=sb://127.0.0.1:{port};SharedAccessKeyName=RootManageSharedAccessKey;"
        f"SharedAccessKey={DEFAULT_KEY};UseDevelopmentEmulator=true")
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"AMQP\x00\x01\x00\x00")
        assert s.recv(8) == b"AMQP\x00\x01\x00\x00"
    code, _, err = stop(proc)
    assert code == 0, err
    with LocalNamespace("secondary", data_dir=dirs["data"]) as ns:
        entities = {e.name: (e.partitions, e.lock_duration, e.requires_session)
                    for e in ns.entities()}
    assert entities == {"orders": (0, 5.0, False), "flows": (0, 30.0, True),
                        "steps": (0, 30.0, True), "hub": (2, 0.0, False),
                        "more": (3, 0.0, False)}


def test_a_given_key_is_never_printed(dirs: dict[str, Path]) -> None:
    secret = "bXkgb3duIHNlY3JldCBrZXk="
    proc = start("-n", "primary=0", cwd=dirs["tmp"], env={"GEOGATEWAY_EMULATOR_KEY": secret})
    assert proc.stdout is not None
    line = proc.stdout.readline()
    code, out, err = stop(proc)
    assert line.startswith("namespace primary ready on 127.0.0.1:")
    assert "SharedAccessKey=***;" in line
    assert secret not in line + out + err
    assert code == 0


def test_bad_options_are_one_line_errors(dirs: dict[str, Path], run: Run,
                                         taken_port: int) -> None:
    expect_one_line_error(run("emulator", "-e", "hub"), 2, "NAME:PARTITIONS")
    expect_one_line_error(run("emulator", "-e", "hub:0"), 2, "NAME:PARTITIONS")
    expect_one_line_error(run("emulator", "-n", "primary"), 2, "NAME=PORT")
    expect_one_line_error(run("emulator", "-n", "primary=99999"), 2, "NAME=PORT")
    expect_one_line_error(run("emulator", "--bogus"), 2, "--bogus")
    expect_one_line_error(run("emulator", "-n", f"primary={taken_port}"), 2,
                          "cannot listen", str(taken_port))
    expect_one_line_error(run("emulator", "-n", "a=6000", "-n", "b=6000"), 2, "one port")
    bad = dirs["tmp"] / "bad.toml"
    bad.write_text("[[queue]]\nnom = 'x'\n")
    expect_one_line_error(run("emulator", "--config", str(bad)), 2, "unknown keys")
    expect_one_line_error(run("emulator", "--max-message-size", "10"), 2,
                          "max_message_size", "262144")
    expect_one_line_error(run("emulator", "--max-message-size", "lots"), 2,
                          "--max-message-size")
    bad.write_text("max_message_size = 1\n")
    expect_one_line_error(run("emulator", "--config", str(bad)), 2, "max_message_size")


def test_load_config(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('host = "127.0.0.1"\nkey_name = "Policy"\nmax_message_size = 1048576\n'
                    '[namespaces]\nprimary = 0\n'
                    '[[queue]]\nname = "q"\nmax_delivery_count = 3\n'
                    'dead_lettering_on_message_expiration = true\n'
                    '[[event_hub]]\nname = "h"\npartitions = 8\n')
    config = load_config(path)
    assert config.namespaces == {"primary": 0}
    assert (config.host, config.key_name, config.max_message_size) == (
        "127.0.0.1", "Policy", 1 << 20)
    assert [(q.name, q.max_delivery_count, q.dead_lettering_on_message_expiration)
            for q in config.queues] == [("q", 3, True)]
    assert [(h.name, h.partitions) for h in config.event_hubs] == [("h", 8)]
    for text in ('[[queue]]\nname = 3\n', '[[queue]]\nname = "q"\nlock_duration = "x"\n',
                 '[[queue]]\nname = "q"\ndead_lettering_on_message_expiration = 1\n',
                 '[[queue]]\nname = "q"\nmax_delivery_count = true\n',
                 'surprise = 1\n', '[namespaces]\nprimary = "x"\n', 'not toml ['):
        path.write_text(text)
        with pytest.raises(ConfigError):
            load_config(path)
    with pytest.raises(ConfigError):
        load_config(tmp_path / "missing.toml")


def test_parse_specs() -> None:
    assert parse_namespace("primary=5672") == ("primary", 5672)
    assert parse_event_hub("a:b:4").name == "a:b"
    for bad in ("x", "=1", "x=-1", "x=70000"):
        with pytest.raises(ConfigError):
            parse_namespace(bad)
    for bad in ("x", ":4", "x:0", "x:1025", "x:y"):
        with pytest.raises(ConfigError):
            parse_event_hub(bad)


def test_max_message_size_option_sets_the_limit(dirs: dict[str, Path]) -> None:
    from azure.servicebus import ServiceBusClient, ServiceBusMessage
    from azure.servicebus.exceptions import MessageSizeExceededError

    proc = start("--json", "-n", "primary=0", "-q", "orders", "--max-message-size", "2048",
                 cwd=dirs["tmp"])
    assert proc.stdout is not None
    ready = json.loads(proc.stdout.readline())["namespaces"]
    try:
        with ServiceBusClient.from_connection_string(
                ready["primary"]["connection_string"], retry_total=0) as c, c.get_queue_sender(
                "orders") as sender:
            sender.send_messages(ServiceBusMessage(b"x" * 1000))
            with pytest.raises(MessageSizeExceededError):
                sender.send_messages(ServiceBusMessage(b"x" * 3000))
    finally:
        code, _, err = stop(proc)
    assert code == 0, err


def test_policy_option_gives_a_key_its_rights(dirs: dict[str, Path], run: Run) -> None:
    from azure.servicebus import ServiceBusClient, ServiceBusMessage
    from azure.servicebus.exceptions import ServiceBusAuthorizationError

    key = "bGlzdGVuZXIga2V5"
    expect_one_line_error(run("emulator", "--policy", f"listener={key}:Read"), 2, "Read")
    proc = start("--json", "-n", "primary=0", "-q", "orders", "--policy",
                 f"listener={key}:Listen", cwd=dirs["tmp"])
    assert proc.stdout is not None
    ready = json.loads(proc.stdout.readline())["namespaces"]
    root = ready["primary"]["connection_string"]
    listener = root.replace("RootManageSharedAccessKey", "listener").replace(DEFAULT_KEY, key)
    try:
        with ServiceBusClient.from_connection_string(listener, retry_total=0) as c:
            with pytest.raises(ServiceBusAuthorizationError), c.get_queue_sender(
                    "orders") as sender:
                sender.send_messages(ServiceBusMessage(b"x"))
            with c.get_queue_receiver("orders", max_wait_time=0.2) as receiver:
                assert receiver.receive_messages(max_wait_time=0.2) == []
    finally:
        code, out, err = stop(proc)
    assert code == 0, err
    assert key not in out + err
