"""The drill over the Azure SDK transports: two emulated namespaces started by the drill
itself (``geogateway emulator`` in a child process), the unmodified SDK clients, the
outages injected by closing and refusing the emulated namespace's connections.

Small counts, one scenario per mode and transport here; the full matrix at the default
settings is in benchmarks/README.md (§5)."""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.drill import Scenario, run_drill
from replication import ConfigError
from tests.gateway.cli.cli_support import run_process
from tests.gateway.drill.drill_support import kill_drill_midway

pytestmark = [
    pytest.mark.anyio,
    # Rarely (once in dozens of runs), an SDK connection that the emulator force-closes
    # while the SDK is closing it too is left for the garbage collector. That is a socket
    # the SDK owns; these tests judge what the drill delivers. The transports' own tests
    # (tests/gateway/transports/) keep every warning an error.
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]


@pytest.fixture(autouse=True)
def _collect_here() -> Iterator[None]:
    # Collect what a drill left behind now, under this module's warning filters, rather
    # than during whichever test runs next.
    yield
    gc.collect()


@pytest.mark.parametrize(("transport", "scenario", "mode"), [
    ("servicebus", Scenario.PRIMARY_OUTAGE, "passive"),
    ("servicebus", Scenario.LOST_REPLIES, "active"),
    ("eventhubs", Scenario.FLAPPING, "passive"),
    ("eventhubs", Scenario.BOTH_DOWN, "active"),
    ("servicebus", Scenario.HANG, "passive"),
    ("servicebus", Scenario.HANG, "active"),
    ("eventhubs", Scenario.HANG, "passive"),
    ("eventhubs", Scenario.HANG, "active"),
])
async def test_drill_over_the_sdk_transports(transport: str, scenario: Scenario, mode: str,
                                             tmp_path: Path) -> None:
    report = await run_drill(transport=transport, scenario=scenario, mode=mode,
                             messages=80, data_dir=tmp_path / "drill", settle_timeout=30.0,
                             keep_state=True)
    assert report.transport == transport
    assert report.sent == report.delivered == 80, report
    assert report.lost == 0 and report.duplicates_delivered == 0, report
    assert report.replayed == report.buffered, report
    if scenario is Scenario.BOTH_DOWN:
        assert report.buffered > 0  # both were down for a while: the disk held them
    if scenario is Scenario.HANG:
        # The emulator accepted and never answered: the sends made meanwhile were
        # hedged (passive) or left the hung copy buffered (active) within 1 s at p99.
        assert report.hung_send_seconds and report.passed, report
        assert report.hung_send_p99 is not None and report.hung_send_p99 <= 1.0
    if mode == "passive" and scenario is not Scenario.LOST_REPLIES:
        assert report.failovers >= 1 and report.failover_seconds
    # The default settings fail over from an outage within the 2 s the drill is judged
    # by. A lost reply is noticed only by the 2 s operation timeout: that send takes it,
    # plus the other namespace's send (2.2-3.0 s measured, benchmarks/README.md §5).
    bound = 4.0 if scenario is Scenario.LOST_REPLIES else 2.0
    assert all(s <= bound for s in report.failover_seconds), report.failover_seconds
    assert report.failovers == len(report.failover_seconds)
    # The emulator's log is kept with the drill's files.
    assert report.state_dir is not None
    assert (Path(report.state_dir) / "emulator.log").exists()


async def test_consumer_scenarios_need_partitions() -> None:
    with pytest.raises(ConfigError, match="partitioned"):
        await run_drill(transport="servicebus", scenario=Scenario.CONSUMER_CRASH, messages=10)


async def test_consumer_crash_over_event_hubs(tmp_path: Path) -> None:
    # Three receiver processes on the Event Hubs transport, one SIGKILLed mid-run
    report = await run_drill(transport="eventhubs", scenario=Scenario.CONSUMER_CRASH,
                             messages=120, data_dir=tmp_path / "drill", settle_timeout=60.0)
    assert report.transport == "eventhubs"
    assert report.sent == report.delivered == 120, report
    assert report.lost == 0 and report.duplicates_delivered == 0, report


def test_a_worker_reads_event_hubs_when_given_connection_strings(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from gateway.drill.consumers import _worker as worker

    assert worker._namespace("primary") == "local://primary"
    conn = ("Endpoint=sb://127.0.0.1:5672;SharedAccessKeyName=k;SharedAccessKey=a2V5;"
            "UseDevelopmentEmulator=true")
    monkeypatch.setenv(worker.connection_string_variable("primary"), conn)
    config = worker._namespace("primary")
    assert not isinstance(config, str)
    assert (config.kind, config.name, config.connection_string) == ("eventhubs", "primary", conn)


async def test_unknown_transport_is_refused() -> None:
    with pytest.raises(ConfigError, match="transport"):
        await run_drill(transport="carrier-pigeon", messages=10)


def test_cli_drill_over_service_bus(tmp_path: Path) -> None:
    code, out, err = run_process("drill", "--transport", "servicebus", "--messages", "50",
                                 "--json", "-", cwd=tmp_path, timeout=120)
    assert code == 0, err
    assert "Traceback" not in err
    report = json.loads(out)
    assert report["transport"] == "servicebus" and report["passed"] is True
    assert report["lost"] == 0 and report["duplicates_delivered"] == 0


def test_a_killed_service_bus_drill_leaves_no_emulator(tmp_path: Path) -> None:
    # Given a Service Bus drill with its emulator child, sending
    # When the drill itself is SIGKILLed (no chance to stop its child)
    left = kill_drill_midway(tmp_path / "drill", "--transport", "servicebus",
                             "--messages", "100000", children=1)
    # Then the emulator went with it
    assert left == {}, left
