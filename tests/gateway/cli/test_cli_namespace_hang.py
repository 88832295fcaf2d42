"""``geogateway namespace faults NAME --hang / --no-hang``, ``up`` and ``status`` of a hang."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

from gateway.transports import LocalTransport
from replication import Message
from tests.gateway.cli.cli_support import Run, expect_one_line_error, ok_json, run_process

pytestmark = pytest.mark.usefixtures("dirs")


def status(run: Run) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in ok_json(run("namespace", "status", "--json"))}


def test_hang_is_set_shown_kept_and_cleared(run: Run) -> None:
    # When a namespace is hung
    code, out, _ = run("namespace", "faults", "primary", "--hang")
    assert code == 0 and "HUNG" in out
    # Then status shows it (JSON and table), and a hung namespace is still up
    primary = status(run)["primary"]
    assert primary["hang"] is True and primary["up"] is True
    assert status(run)["secondary"]["hang"] is False
    code, out, _ = run("namespace", "status", "primary")
    assert code == 0 and "HUNG" in out
    # And faults given without --hang/--no-hang keep it
    assert run("namespace", "faults", "primary", "--latency", "0.01")[0] == 0
    primary = status(run)["primary"]
    assert primary["hang"] is True and primary["latency"] == 0.01
    # And down keeps it: the table says both
    assert run("namespace", "down", "primary")[0] == 0
    code, out, _ = run("namespace", "status", "primary")
    assert "DOWN, hung" in out
    # When up, both are cleared
    assert run("namespace", "up", "primary")[0] == 0
    primary = status(run)["primary"]
    assert primary["hang"] is False and primary["up"] is True


def test_no_hang_clears_it(run: Run) -> None:
    assert run("namespace", "faults", "primary", "--hang")[0] == 0
    code, out, _ = run("namespace", "faults", "primary", "--no-hang")
    assert code == 0 and "not hung" in out
    assert status(run)["primary"]["hang"] is False


@pytest.mark.parametrize(("args", "code", "words"), [
    (["namespace", "faults", "nosuch", "--hang"], 2, ["'nosuch'", "--new"]),
    (["namespace", "faults", "primary", "--hang=yes"], 2, ["--hang"]),
])
def test_bad_hang_input_is_one_line_and_changes_nothing(
        run: Run, dirs: dict[str, Path], args: list[str], code: int, words: list[str]) -> None:
    expect_one_line_error(run(*args), code, *words)
    assert not (dirs["data"] / "nosuch.control.json").exists()
    assert status(run)["primary"]["hang"] is False


@pytest.mark.anyio
async def test_a_hang_set_by_the_command_holds_a_client_until_up(dirs: dict[str, Path]) -> None:
    # Given a namespace hung by the command, in another process
    code, _, err = run_process("namespace", "faults", "primary", "--hang", cwd=dirs["tmp"])
    assert code == 0, err
    async with LocalTransport("primary", data_dir=dirs["data"]) as transport:
        sent: list[bool] = []

        async def send() -> None:
            await transport.send("orders", [Message(b"held", message_id="held")])
            sent.append(True)

        async with anyio.create_task_group() as tg:
            tg.start_soon(send)
            # Then a client's send waits, unanswered and not failed, while the command
            # that releases it runs (an interpreter start: far longer than a send)
            await anyio.sleep(0.2)
            assert sent == []
            # When `namespace up` runs, the send proceeds
            code, _, err = await anyio.to_thread.run_sync(
                lambda: run_process("namespace", "up", "primary", cwd=dirs["tmp"]))
            assert code == 0, err
        assert sent == [True]
        assert [r.body for r in await transport.receive("orders")] == [b"held"]
