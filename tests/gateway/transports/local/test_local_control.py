"""Local namespace control from other processes, faults, files and errors."""

from __future__ import annotations

import json
import os
import stat
import sys
import textwrap
import time
from pathlib import Path

import anyio
import pytest

from gateway.transports import ControlFile, LocalNamespace, LocalTransport, default_data_dir
from replication import ConfigError, Message, NamespaceUnavailable, OperationTimeout

pytestmark = pytest.mark.anyio


async def run_python(code: str) -> str:
    """Run ``code`` in a fresh interpreter (another process) and return its stdout."""
    done = await anyio.run_process([sys.executable, "-c", textwrap.dedent(code)])
    return done.stdout.decode()


async def test_down_from_another_process(namespace: LocalNamespace, transport: LocalTransport,
                                         tmp_path: Path) -> None:
    # Given a client that works, and a receive waiting on an empty queue
    await transport.send("orders", [Message(b"a")])
    [r] = await transport.receive("orders")
    await transport.complete(r)
    waiting: dict[str, object] = {}

    async def wait_for_message() -> None:
        try:
            await transport.receive("orders", max_wait=20)
        except NamespaceUnavailable as exc:
            waiting["at"], waiting["error"] = time.monotonic(), exc

    async with anyio.create_task_group() as tg:
        tg.start_soon(wait_for_message)
        await anyio.sleep(0.1)
        # When another process takes the namespace down
        await run_python(f"""
            from gateway.transports import LocalNamespace
            LocalNamespace('primary', data_dir={str(tmp_path)!r}).down()
        """)
        downed = time.monotonic()

        # Then the next operation raises at once, and so did the waiting receive
        with pytest.raises(NamespaceUnavailable, match="is down") as info:
            await transport.send("orders", [Message(b"b")])
        assert time.monotonic() - downed < 1.0
    assert isinstance(waiting["error"], NamespaceUnavailable)
    assert float(waiting["at"]) - downed < 1.0  # type: ignore[arg-type]
    assert info.value.namespace == "primary"
    assert "\n" not in str(info.value)
    for op in (transport.probe(), transport.receive("orders"), transport.get_partition_ids("x")):
        with pytest.raises(NamespaceUnavailable):
            await op
    assert namespace.status().up is False

    # When it comes back up (from this process), everything works again
    namespace.up()
    await transport.probe()
    await transport.send("orders", [Message(b"c")])
    assert [m.body for m in await transport.receive("orders")] == [b"c"]


async def test_two_processes_never_receive_the_same_message(
    namespace: LocalNamespace, tmp_path: Path
) -> None:
    # Given 300 messages in a queue with long locks
    namespace.create_queue("orders", lock_duration=300)
    async with LocalTransport("primary", data_dir=tmp_path) as transport:
        await transport.send(
            "orders", [Message(f"{i}".encode(), message_id=f"m{i}") for i in range(300)]
        )
    receiver = """
        import anyio, json, pathlib, sys, time
        from gateway.transports import LocalTransport
        data = pathlib.Path(sys.argv[1])
        async def main():
            # Start together: wait until both receivers are ready.
            (data / f"ready-{sys.argv[2]}").touch()
            deadline = time.monotonic() + 20
            while len(list(data.glob("ready-*"))) < 2 and time.monotonic() < deadline:
                await anyio.sleep(0.005)
            ids = []
            async with LocalTransport("primary", data_dir=data) as t:
                while got := await t.receive("orders", max_messages=3, max_wait=0.3):
                    ids += [r.message_id for r in got]
                    await anyio.sleep(0.001)
            print(json.dumps(ids))
        anyio.run(main)
    """
    results: list[list[str]] = []

    async def in_subprocess(i: int) -> None:
        done = await anyio.run_process(
            [sys.executable, "-c", textwrap.dedent(receiver), str(tmp_path), str(i)])
        results.append(json.loads(done.stdout))

    # When two processes receive from it at the same time
    async with anyio.create_task_group() as tg:
        tg.start_soon(in_subprocess, 1)
        tg.start_soon(in_subprocess, 2)

    # Then both got messages, and every message went to exactly one of them
    assert results[0] and results[1], results
    every = results[0] + results[1]
    assert len(every) == 300
    assert set(every) == {f"m{i}" for i in range(300)}


async def test_lost_replies_land_and_raise(namespace: LocalNamespace,
                                           transport: LocalTransport) -> None:
    namespace.set_faults(lost_replies=1.0)
    with pytest.raises(OperationTimeout, match="landed") as info:
        await transport.send("orders", [Message(b"a", message_id="m1")])
    assert info.value.namespace == "primary"
    namespace.set_faults()
    [r] = await transport.receive("orders")
    assert r.message_id == "m1"


async def test_latency(namespace: LocalNamespace, transport: LocalTransport) -> None:
    namespace.set_faults(latency=0.3)
    assert namespace.status().latency == 0.3
    start = time.monotonic()
    await transport.probe()
    assert time.monotonic() - start >= 0.3
    namespace.set_faults()
    start = time.monotonic()
    await transport.probe()
    assert time.monotonic() - start < 0.25


def test_status_and_fault_validation(namespace: LocalNamespace, tmp_path: Path) -> None:
    status = namespace.status()
    assert (status.name, status.up, status.latency, status.lost_replies) == (
        "primary", True, 0.0, 0.0)
    assert status.path == str(tmp_path / "primary.db")
    namespace.set_faults(latency=0.5, lost_replies=0.25)
    namespace.down()
    other = LocalNamespace("primary", data_dir=tmp_path).status()
    assert (other.up, other.latency, other.lost_replies) == (False, 0.5, 0.25)
    for bad in ({"latency": -1.0}, {"lost_replies": 1.5}, {"latency": float("nan")}):
        with pytest.raises(ConfigError):
            namespace.set_faults(**bad)


@pytest.mark.parametrize("url", [
    "primary", "http://primary", "local://", "local://a/b", "local://a?x=1",
    "local://../etc", "local://a b", "local://user@host:1",
])
def test_bad_url_is_a_config_error(url: str) -> None:
    with pytest.raises(ConfigError, match="expected local://NAME") as info:
        LocalTransport.from_url(url)
    assert "\n" not in str(info.value)


async def test_from_url(tmp_path: Path) -> None:
    async with LocalTransport.from_url("local://secondary", data_dir=tmp_path) as t:
        assert t.namespace == "secondary"
        await t.send("orders", [Message(b"a")])
    assert (tmp_path / "secondary.db").exists()
    with pytest.raises(ConfigError, match="bad local namespace name"):
        LocalNamespace("../x", data_dir=tmp_path)


async def test_files_are_private(namespace: LocalNamespace, transport: LocalTransport,
                                 tmp_path: Path) -> None:
    await transport.send("orders", [Message(b"secret")])
    namespace.down()
    namespace.up()
    files = [tmp_path / n for n in os.listdir(tmp_path) if n.startswith("primary")]
    assert {p.name for p in files} >= {"primary.db", "primary.db-wal", "primary.control.json"}
    for p in files:
        assert stat.S_IMODE(p.stat().st_mode) == 0o600, p.name


async def test_corrupt_namespace_file_is_an_outage(tmp_path: Path) -> None:
    (tmp_path / "primary.db").write_bytes(b"this is not a sqlite file " * 200)
    async with LocalTransport("primary", data_dir=tmp_path) as t:
        for op in (t.probe(), t.send("orders", [Message(b"a")]), t.receive("orders")):
            with pytest.raises(NamespaceUnavailable, match="is corrupt") as info:
                await op
            assert "\n" not in str(info.value)
            assert "primary.db" in str(info.value)
    with pytest.raises(NamespaceUnavailable, match="is corrupt"):
        LocalNamespace("primary", data_dir=tmp_path).entities()


def test_default_data_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GEOGATEWAY_DATA_DIR", str(tmp_path))
    assert default_data_dir() == str(tmp_path)
    assert LocalNamespace("primary").path == os.path.join(str(tmp_path), "primary.db")
    monkeypatch.delenv("GEOGATEWAY_DATA_DIR")
    assert default_data_dir().endswith(os.path.join("geogateway", "namespaces"))


def test_broken_control_file_keeps_the_last_state(namespace: LocalNamespace,
                                                  tmp_path: Path) -> None:
    namespace.down()
    assert namespace.status().up is False
    (tmp_path / "primary.control.json").write_text("{not json")
    assert namespace.status().up is False


def test_the_hang_fault_is_written_read_and_kept_by_other_updates(tmp_path):
    # Given a control file
    control = ControlFile(str(tmp_path / "primary.control.json"))
    # When the namespace is hung, then its latency changed
    control.update(hang=True)
    control.update(latency=0.1)
    # Then another reader sees both, and clearing the hang keeps the latency
    other = ControlFile(control.path)
    assert (other.read().hang, other.read().latency) == (True, 0.1)
    control.update(hang=False)
    assert (ControlFile(control.path).read().hang, ControlFile(control.path).read().latency) == (
        False, 0.1)
