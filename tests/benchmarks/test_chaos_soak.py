"""The chaos soak (``benchmarks/chaos_soak.py``): its check finds a lost and a
duplicated id, and a short soak (PostgreSQL restarted, a namespace hung, processes
SIGKILLed) loses nothing and duplicates no effect."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _soak_module() -> ModuleType:
    if "chaos_soak" not in sys.modules:
        spec = importlib.util.spec_from_file_location("chaos_soak",
                                                      ROOT / "benchmarks" / "chaos_soak.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["chaos_soak"] = module  # its dataclasses look their module up
        spec.loader.exec_module(module)
    return sys.modules["chaos_soak"]


def test_the_check_finds_a_lost_and_a_duplicated_id() -> None:
    soak = _soak_module()
    # Given three returned sends, one never effected and one effected twice
    returned = ["s1-g001-0000000", "s1-g001-0000001", "s2-g001-0000000"]
    effects = {"s1-g001-0000000": 1, "s2-g001-0000000": 2, "s1-g002-0000000": 1}
    # When they are checked
    verdict = soak.check(returned, effects)
    # Then the lost id and the duplicated one are named, and the soak fails
    assert verdict.lost == ["s1-g001-0000001"]
    assert verdict.duplicates == {"s2-g001-0000000": 2}
    assert verdict.effected_not_returned == 1  # a killed sender's send: not judged
    assert not verdict.passed
    # And once every returned id has one effect it passes
    assert soak.check(returned, {**effects, "s1-g001-0000001": 1,
                                 "s2-g001-0000000": 1}).passed


def test_a_send_that_never_returned_is_not_counted(tmp_path: Path) -> None:
    soak = _soak_module()
    # Given a journal whose sender was killed in a send, and in the middle of a line
    journal = tmp_path / "journal-g001.txt"
    journal.write_text("S a\nR a 10.0 10.5\nS b\nR b 11.0 12.5\nS c\nR c 13.0")
    # When it is read
    read = soak.Journal.read([journal])
    # Then only the sends that returned count, with their latencies
    assert read.started == 3
    assert sorted(read.returned) == ["a", "b"]
    assert read.latencies() == [0.5, 1.5]
    assert read.latencies([(11.2, 11.4)]) == [1.5]  # b overlapped the window


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_a_short_soak_loses_nothing_and_duplicates_no_effect(tmp_path: Path) -> None:
    # Given the soak for 10 s, a chaos action every 1-3 s (seed 3: PostgreSQL is
    # restarted first, then a namespace hangs; senders and receivers are SIGKILLed), and
    # longer until each of those happened (a starved machine restarted PostgreSQL slowly
    # and the 10 s ran out before the hang)
    command = [sys.executable, "benchmarks/chaos_soak.py", "--seconds", "10", "--seed", "3",
               "--gaps", "1,3", "--each-once", "--drain-timeout", "30", "--json",
               "--keep", str(tmp_path)]
    # When it runs
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=145)
    # Then every id whose send returned had exactly one effect
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report["passed"] and report["lost"] == 0 and report["duplicates"] == 0, report
    assert report["returned"] > 100, report
    # And the chaos happened: the server restarted, a namespace hung, processes killed
    actions = report["actions"]
    assert actions.get("PostgreSQL restarts", 0) >= 1, actions
    assert actions.get("namespaces hung", 0) >= 1, actions
    assert actions.get("senders killed", 0) + actions.get("receivers killed", 0) >= 1, actions
    assert actions.get("exited by themselves", 0) == 0, report["events"]
