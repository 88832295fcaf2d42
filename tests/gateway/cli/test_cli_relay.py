"""``geogateway relay request`` and ``geogateway relay listen`` against the relay emulator:
a real listener process, real HTTP requests, and the failover after ``namespace down``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.relay import RelayEmulator, RelayThread
from gateway.transports.local._control import ControlFile, namespace_files
from tests.gateway.cli.cli_support import Run, expect_one_line_error, run_process

HC = "orders"


@pytest.fixture
def emulator(tmp_path: Path) -> Iterator[RelayEmulator]:
    with RelayThread(RelayEmulator({"primary": 0, "secondary": 0}, [HC],
                                   data_dir=tmp_path / "ns", answer_timeout=5.0)) as emu:
        yield emu


def strings(emu: RelayEmulator) -> list[str]:
    return ["--primary", emu.connection_string("primary", HC),
            "--secondary", emu.connection_string("secondary", HC)]


def start_listener(emu: RelayEmulator, cwd: Path, *extra: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "relay", "listen", "--json", *strings(emu), *extra],
        cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env={**os.environ, "PYTHONPATH": os.pathsep.join([str(cwd), *sys.path])})
    assert proc.stdout is not None
    ready = json.loads(proc.stdout.readline())
    assert set(ready["listening"]) == {"primary", "secondary"}
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:  # the second channel may open a moment later
        if all(emu.listener_count(ns, HC) for ns in ("primary", "secondary")):
            return proc
        time.sleep(0.05)
    proc.kill()
    pytest.fail("the listener did not connect to both namespaces")


def stop(proc: subprocess.Popen[str]) -> tuple[int, str]:
    proc.send_signal(signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    return proc.returncode, err


def test_request_is_echoed_then_fails_over_when_the_primary_goes_down(
        dirs: dict[str, Path], run: Run, emulator: RelayEmulator, tmp_path: Path) -> None:
    listener = start_listener(emulator, tmp_path)
    try:
        code, out, err = run("relay", "request", "PUT", "/items/1", "-d", "hello",
                             "-H", "Content-Type: text/plain", *strings(emulator), "--json")
        assert code == 0, err
        answer = json.loads(out)
        assert answer["status"] == 200
        assert answer["body"] == "hello"
        assert answer["role"] == "primary"
        assert answer["headers"]["content-type"] == "text/plain"
        assert answer["headers"]["x-geogateway-target"] == f"/{HC}/items/1"
        assert "via" in answer["headers"]  # a listener answered, not the relay

        ControlFile(namespace_files("primary", tmp_path / "ns")[1]).update(down=True)
        time.sleep(0.5)  # the emulator polls its control files every 0.1 s
        code, out, err = run("relay", "request", "GET", "/items/1", *strings(emulator), "--json")
        assert code == 0, err
        assert json.loads(out)["role"] == "secondary"
    finally:
        code, err = stop(listener)
    assert code == 0, err
    assert "relay listener stopped" in err
    assert "Traceback" not in err


def test_request_prints_the_body_and_who_answered(
        dirs: dict[str, Path], run: Run, emulator: RelayEmulator, tmp_path: Path) -> None:
    body = tmp_path / "body.bin"
    body.write_bytes(b"\x00\x01binary")
    listener = start_listener(emulator, tmp_path)
    try:
        code, out, err = run("relay", "request", "POST", "/x", "--data", f"@{body}",
                             *strings(emulator))
    finally:
        stop(listener)
    assert code == 0, err
    assert out.encode("utf-8", "surrogateescape").endswith(b"binary")
    assert err.startswith("200 OK from primary")


def test_listen_serves_an_asgi_app_given_as_module_colon_app(
        dirs: dict[str, Path], run: Run, emulator: RelayEmulator, tmp_path: Path) -> None:
    (tmp_path / "myapp.py").write_text(
        "async def app(scope, receive, send):\n"
        "    await send({'type': 'http.response.start', 'status': 201,\n"
        "                'headers': [(b'x-app', b'yes')]})\n"
        "    await send({'type': 'http.response.body', 'body': scope['path'].encode()})\n")
    listener = start_listener(emulator, tmp_path, "--app", "myapp:app")
    try:
        config = tmp_path / "relay.toml"
        config.write_text(f'[relay]\nprimary = "{emulator.connection_string("primary")}"\n'
                          f'secondary = "{emulator.connection_string("secondary")}"\n'
                          f'hybrid_connection = "{HC}"\n')
        code, out, err = run("relay", "request", "GET", "/hello", "--config", str(config),
                             "--json")
    finally:
        stop(listener)
    assert code == 0, err
    answer = json.loads(out)
    assert (answer["status"], answer["headers"]["x-app"]) == (201, "yes")
    assert answer["body"].endswith("/hello")


def test_request_fails_with_one_line_when_no_namespace_answers(
        dirs: dict[str, Path], run: Run, emulator: RelayEmulator, tmp_path: Path) -> None:
    for ns in ("primary", "secondary"):
        ControlFile(namespace_files(ns, tmp_path / "ns")[1]).update(down=True)
    time.sleep(0.5)
    line = expect_one_line_error(run("relay", "request", "GET", "/", *strings(emulator)),
                                 1, "both namespaces are unavailable")
    assert "SharedAccessKey=" not in line


BAD_KEY = "Endpoint=sb://127.0.0.1:9/;SharedAccessKeyName=k;SharedAccessKey=s3cret;" \
          "UseDevelopmentEmulator=true"


@pytest.mark.parametrize(("args", "words"), [
    (("request", "GET"), ("--primary and --secondary",)),
    (("request", "GET", "--primary", BAD_KEY, "-c", HC), ("both --primary and --secondary",)),
    (("request", "GET", "--primary", "nonsense", "--secondary", BAD_KEY), ("--primary",)),
    (("request", "G E T", "--primary", BAD_KEY, "--secondary", BAD_KEY, "-c", HC),
     ("bad HTTP method",)),
    (("request", "GET", "-H", "no-colon", "--primary", BAD_KEY, "--secondary", BAD_KEY,
      "-c", HC), ("Name: value",)),
    (("request", "POST", "-d", "@/no/such/file", "--primary", BAD_KEY,
      "--secondary", BAD_KEY.replace(":9", ":10"), "-c", HC), ("cannot read",)),
    (("request", "GET", "--config", "/no/such.toml"), ("cannot read the relay config",)),
    (("listen", "--primary", BAD_KEY, "-c", HC, "--app", "no_such_module:app"),
     ("cannot import",)),
    (("listen", "--primary", BAD_KEY, "-c", HC, "--app", "notanapp"), ("module:attribute",)),
    (("listen", "--primary", BAD_KEY, "-c", HC, "--app", "json:no_such_name"),
     ("no callable",)),
])
def test_bad_input_is_one_line_without_the_key(dirs: dict[str, Path], run: Run,
                                              args: tuple[str, ...],
                                              words: tuple[str, ...]) -> None:
    line = expect_one_line_error(run("relay", *args), None, *words)
    assert "s3cret" not in line


def test_listen_stops_on_sigterm_before_connecting(dirs: dict[str, Path], tmp_path: Path) -> None:
    # Nothing listens on port 9: the listener keeps retrying until told to stop.
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "relay", "listen", "--primary", BAD_KEY, "-c", HC],
        cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    time.sleep(2.0)
    code, err = stop(proc)
    assert code == 0, err
    assert "Traceback" not in err
    assert "s3cret" not in err


@pytest.mark.parametrize("args", [("relay", "--help"), ("relay", "request", "--help"),
                                  ("relay", "listen", "--help")])
def test_relay_help_loads_neither_httpx_nor_aiohttp(args: tuple[str, ...],
                                                     tmp_path: Path) -> None:
    from tests.gateway.cli.test_cli_startup import cli_run, loaded_after

    loaded = loaded_after(cli_run(*args), tmp_path)
    assert not loaded & {"httpx", "aiohttp", "azure"}, sorted(loaded)


# -- what the relay commands say when the hybrid connection or the key is wrong ---------


def wrong_key(conn_str: str) -> str:
    return conn_str.replace("SharedAccessKey=SAS_KEY_VALUE", "SharedAccessKey=d3Jvbmcta2V5")


def test_listen_to_a_missing_hybrid_connection_exits_with_one_line(
        dirs: dict[str, Path], emulator: RelayEmulator, tmp_path: Path) -> None:
    result = run_process("relay", "listen", "--primary", emulator.connection_string("primary"),
                         "--secondary", emulator.connection_string("secondary"), "-c", "nosuch",
                         cwd=tmp_path, timeout=30)
    line = expect_one_line_error(result, 1, "hybrid connection 'nosuch' does not exist",
                                 "-c / EntityPath")
    assert "SAS_KEY_VALUE" not in line


def test_listen_to_one_namespace_without_the_hybrid_connection_exits_too(
        dirs: dict[str, Path], emulator: RelayEmulator, tmp_path: Path) -> None:
    # The primary has it; the secondary is reached under a name it does not serve: a
    # listener serving one namespace of two would lose the geo-redundancy silently.
    result = run_process("relay", "listen", "--primary",
                         emulator.connection_string("primary", HC), "--secondary",
                         emulator.connection_string("secondary", "nosuch"),
                         cwd=tmp_path, timeout=30)
    expect_one_line_error(result, 1, "'nosuch' does not exist",
                          emulator.endpoint("secondary", HC).namespace)


def test_listen_with_a_wrong_key_exits_with_one_line_and_a_hint(
        dirs: dict[str, Path], emulator: RelayEmulator, tmp_path: Path) -> None:
    result = run_process("relay", "listen", "--primary",
                         wrong_key(emulator.connection_string("primary", HC)), "--secondary",
                         wrong_key(emulator.connection_string("secondary", HC)),
                         cwd=tmp_path, timeout=30)
    line = expect_one_line_error(result, 1, "401", "check the shared access key name and key")
    assert "WSServerHandshakeError" not in line and "d3Jvbmcta2V5" not in line


def test_request_to_a_missing_hybrid_connection_names_it(
        dirs: dict[str, Path], emulator: RelayEmulator, tmp_path: Path) -> None:
    result = run_process("relay", "request", "GET", "/", "--primary",
                         emulator.connection_string("primary"), "--secondary",
                         emulator.connection_string("secondary"), "-c", "nosuch",
                         cwd=tmp_path, timeout=30)
    line = expect_one_line_error(result, 1, "hybrid connection 'nosuch' does not exist",
                                 "404", "-c / EntityPath")
    assert "unavailable" not in line


def test_request_with_a_wrong_key_says_what_to_check(
        dirs: dict[str, Path], emulator: RelayEmulator, tmp_path: Path) -> None:
    result = run_process("relay", "request", "GET", "/", "--primary",
                         wrong_key(emulator.connection_string("primary", HC)), "--secondary",
                         wrong_key(emulator.connection_string("secondary", HC)),
                         cwd=tmp_path, timeout=30)
    expect_one_line_error(result, 1, "401", "check the shared access key name and key")
