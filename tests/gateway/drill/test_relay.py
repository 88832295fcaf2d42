"""The relay drills (``geogateway drill --scenario relay-outage|relay-flapping``): real
HTTP requests through the relay emulator and a listener on both namespaces, while the
primary namespace goes down through its control file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway.drill import RelayScenario, run_drill, run_relay_drill
from gateway.drill import _relay as _drill_relay
from gateway.relay import RelayRequest, RelayResponse
from replication import ConfigError
from tests.gateway.cli.cli_support import Run, clean_env, expect_one_line_error


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def is_dir(path: str | None) -> bool:
    return path is not None and Path(path).is_dir()


@pytest.mark.anyio
async def test_outage_fails_over_once_and_every_request_is_answered(tmp_path: Path) -> None:
    seen: list[Path] = []
    report = await run_relay_drill(scenario="relay-outage", requests=60, data_dir=tmp_path,
                                   on_state_dir=seen.append)
    assert report.passed, report
    assert (report.sent, report.answered, report.failed) == (60, 60, 0)
    # The primary answers until the outage at 30%; the client stays on the secondary.
    assert report.answered_by == {"primary": 18, "secondary": 42}
    assert report.failovers == len(report.failover_seconds) == 1
    assert report.role_swaps == 1
    assert 0 < report.failover_seconds[0] < 5
    assert report.state_dir is None and not seen[0].exists()  # removed: it passed


@pytest.mark.anyio
async def test_flapping_primary_fails_over_once_and_the_client_stays(tmp_path: Path) -> None:
    report = await run_relay_drill(scenario=RelayScenario.RELAY_FLAPPING, requests=50,
                                   data_dir=tmp_path, keep_state=True)
    assert report.passed, report
    assert report.answered_by == {"primary": 10, "secondary": 40}
    # Later outages of the primary hit a namespace the client has left: no failover.
    assert report.failovers == report.role_swaps == 1
    assert is_dir(report.state_dir)
    data = report.to_dict()
    assert data["failovers"] == len(data["failover_seconds"]) == 1
    assert data["passed"] is True


@pytest.mark.anyio
async def test_bad_arguments_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown relay scenario"):
        await run_relay_drill(scenario="nope", data_dir=tmp_path)
    with pytest.raises(ConfigError, match="at least 1 request"):
        await run_relay_drill(requests=0, data_dir=tmp_path)
    with pytest.raises(ConfigError, match="relay-hang sends at least 20 requests"):
        await run_relay_drill(scenario="relay-hang", requests=19, data_dir=tmp_path)
    with pytest.raises(ConfigError, match="run_relay_drill"):
        await run_drill(scenario="relay-outage", data_dir=tmp_path)


def test_cli_relay_drill_json(run: Run, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    clean_env(monkeypatch, tmp_path)
    code, out, err = run("drill", "--scenario", "relay-outage", "--requests", "30",
                         "--data-dir", str(tmp_path / "d"), "--json", "-")
    assert code == 0, err
    report = json.loads(out)
    assert report["passed"] is True
    assert (report["sent"], report["answered"], report["failovers"]) == (30, 30, 1)
    assert report["failover_max_seconds"] == report["failover_seconds"][0]


def test_cli_relay_drill_table(run: Run, monkeypatch: pytest.MonkeyPatch,
                               tmp_path: Path) -> None:
    clean_env(monkeypatch, tmp_path)
    code, out, err = run("drill", "--scenario", "relay-flapping", "--requests", "20",
                         "--data-dir", str(tmp_path / "d"))
    assert code == 0, err
    for row in ("requests sent", "answered", "failovers", "failover time", "PASS"):
        assert row in out


def test_cli_relay_drill_fails_when_idempotent_requests_get_no_answer(
        run: Run, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    clean_env(monkeypatch, tmp_path)

    async def broken(self: object, request: RelayRequest) -> RelayResponse:
        raise RuntimeError("the service is broken")  # the listener answers 500

    monkeypatch.setattr(_drill_relay._Service, "handle", broken)
    code, out, err = run("drill", "--scenario", "relay-outage", "--requests", "9",
                         "--data-dir", str(tmp_path / "d"), "--json", "-")
    assert code == 1, err
    report = json.loads(out)
    assert report["passed"] is False
    assert report["failed_idempotent"] == 6 and report["answered"] == 0
    assert report["state_dir"] is not None and Path(report["state_dir"]).is_dir()


@pytest.mark.parametrize(("args", "word"), [
    (("--scenario", "relay-outage", "--messages", "5"), "--messages"),
    (("--scenario", "relay-outage", "--transport", "servicebus"), "--transport"),
    (("--scenario", "relay-flapping", "--mode", "active"), "--mode"),
    (("--scenario", "primary-outage", "--requests", "5"), "--requests"),
    (("--scenario", "relay-outage", "--requests", "0"), "--requests"),
])
def test_cli_options_of_the_other_kind_of_drill_are_refused(
        run: Run, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        args: tuple[str, ...], word: str) -> None:
    clean_env(monkeypatch, tmp_path)
    expect_one_line_error(run("drill", *args), 2, word)


@pytest.mark.anyio
async def test_hang_every_first_answer_after_a_hang_is_hedged_within_a_second(
        tmp_path: Path) -> None:
    report = await run_relay_drill(scenario="relay-hang", requests=120, data_dir=tmp_path)
    assert report.passed, report
    assert (report.sent, report.answered, report.failed) == (120, 120, 0)
    # Six hangs, each of the namespace the client was using: six failovers, and the
    # first request after each (a GET) answered by the other namespace
    assert len(report.first_answer_seconds) == report.failovers == report.role_swaps == 6
    assert set(report.answered_by) == {"primary", "secondary"}
    assert report.first_answer_p99 is not None
    assert report.to_dict()["first_answer_p99_seconds"] == report.first_answer_p99


def test_a_hang_drill_fails_when_the_first_answer_after_a_hang_is_over_its_target() -> None:
    from gateway.drill import RelayDrillReport

    def report(*times: float) -> RelayDrillReport:
        return RelayDrillReport(scenario="relay-hang", requests=3, sent=3, answered=3,
                                failed=0, failed_idempotent=0, first_answer_seconds=list(times))

    assert report(0.5, 0.6, 0.99).passed
    assert report(0.5, 1.2).first_answer_p99 == 1.2 and not report(0.5, 1.2).passed
    assert not report().passed  # no hang measured: nothing shows it was met


def test_cli_relay_hang_drill_table_and_its_failure(
        run: Run, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    clean_env(monkeypatch, tmp_path)
    code, out, err = run("drill", "--scenario", "relay-hang", "--requests", "30",
                         "--data-dir", str(tmp_path / "d"))
    assert code == 0, err
    assert "first answer after hang" in out and "over 6 hangs" in out and "PASS" in out
    # The same run against a target no hedge can meet fails, and says why
    monkeypatch.setattr(_drill_relay, "FIRST_ANSWER_TARGET", 0.01)
    code, out, err = run("drill", "--scenario", "relay-hang", "--requests", "30",
                         "--data-dir", str(tmp_path / "d"))
    assert code == 1, err
    assert "first answer after a hang was too slow" in out


def test_cli_relay_hang_with_too_few_requests_is_one_line(
        run: Run, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    clean_env(monkeypatch, tmp_path)
    expect_one_line_error(run("drill", "--scenario", "relay-hang", "--requests", "5",
                              "--data-dir", str(tmp_path / "d")), 1, "at least 20", "--requests")
