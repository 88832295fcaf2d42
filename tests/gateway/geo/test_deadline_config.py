"""The deadline policy in the configuration: the ``[deadlines]`` table and
``GEOGATEWAY_DEADLINE_*`` variables, and their one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.geo._config import GatewayConfig
from replication import ConfigError, DeadlinePolicy
from tests.gateway.cli.cli_support import Run, expect_one_line_error

MINIMAL = 'primary = "local://east"\nsecondary = "local://west"\nentity = "orders"\n'
TABLE = """
[deadlines]
floor = 0.1
ceiling = 0.5
multiplier = 3
percentile = 95
window = 64
initial = 1.0
per_mib = 0.25
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gateway.toml"
    path.write_text(text, encoding="utf-8")
    return path


def load_error(path: Path, env: dict[str, str]) -> str:
    with pytest.raises(ConfigError) as info:
        GatewayConfig.load(path, env=env)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_the_deadlines_table_is_read(tmp_path: Path) -> None:
    # Given a file with a [deadlines] table / When it is loaded
    config = GatewayConfig.load(write(tmp_path, MINIMAL + TABLE), env={})
    # Then each key lands in the policy
    assert config.policy.deadlines == DeadlinePolicy(
        floor=0.1, ceiling=0.5, multiplier=3, percentile=95, window=64, initial=1.0,
        per_mib=0.25)


def test_without_a_table_the_deadlines_are_the_defaults(tmp_path: Path) -> None:
    config = GatewayConfig.load(write(tmp_path, MINIMAL), env={})
    assert config.policy.deadlines == DeadlinePolicy()


def test_env_overrides_the_deadlines_table(tmp_path: Path) -> None:
    env = {"GEOGATEWAY_DEADLINE_FLOOR": "0.2", "GEOGATEWAY_DEADLINE_WINDOW": "32",
           "GEOGATEWAY_DEADLINE_PER_MIB": "0"}
    config = GatewayConfig.load(write(tmp_path, MINIMAL + TABLE), env=env)
    deadlines = config.policy.deadlines
    assert (deadlines.floor, deadlines.window, deadlines.per_mib) == (0.2, 32, 0.0)
    assert deadlines.ceiling == 0.5  # from the file


@pytest.mark.parametrize(
    ("variable", "value", "fragment"),
    [
        ("GEOGATEWAY_DEADLINE_FLOOR", "fast", "$GEOGATEWAY_DEADLINE_FLOOR must be a number"),
        ("GEOGATEWAY_DEADLINE_WINDOW", "1.5",
         "$GEOGATEWAY_DEADLINE_WINDOW must be a whole number"),
        ("GEOGATEWAY_DEADLINE_CEILING", "-1", "ceiling"),
        ("GEOGATEWAY_DEADLINE_MULTIPLIER", "0.5", "multiplier"),
    ],
)
def test_a_bad_deadline_variable_is_a_one_line_error(tmp_path: Path, variable: str, value: str,
                                                     fragment: str) -> None:
    assert fragment in load_error(write(tmp_path, MINIMAL), {variable: value})


@pytest.mark.parametrize(
    ("table", "fragment"),
    [
        ("[deadlines]\nfloor = 0\n", "floor"),
        ("[deadlines]\nfloor = 'quick'\n", "floor"),
        ("[deadlines]\nfloor = 2.0\nceiling = 1.0\n", "ceiling"),
        ("[deadlines]\nhedge_after = 1\n", "hedge_after"),
        ("deadlines = 1\n", "[deadlines]"),
    ],
)
def test_a_bad_deadlines_table_is_a_one_line_error(tmp_path: Path, table: str,
                                                   fragment: str) -> None:
    assert fragment in load_error(write(tmp_path, MINIMAL + table), {})


def test_the_cli_refuses_a_bad_deadline_in_one_line(run: Run, dirs: dict[str, Path],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a config file with a [deadlines] ceiling below its floor
    path = write(dirs["tmp"], MINIMAL + "[deadlines]\nfloor = 1.0\nceiling = 0.5\n")
    # When `geogateway send` reads it / Then one line names the option, and nothing is sent
    expect_one_line_error(run("send", "--config", str(path), "hello"), 1, "ceiling")
    # And so does a bad GEOGATEWAY_DEADLINE_* value beside the file
    monkeypatch.setenv("GEOGATEWAY_DEADLINE_FLOOR", "fast")
    path = write(dirs["tmp"], MINIMAL)
    expect_one_line_error(run("send", "--config", str(path), "hello"), 1,
                          "GEOGATEWAY_DEADLINE_FLOOR")
