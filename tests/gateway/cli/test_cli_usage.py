"""Usage errors exit 2 in every command: an input left out, a value an option or
argument cannot take. One ``error:`` line says what to give instead."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.gateway.cli.cli_support import Run, expect_one_line_error

pytestmark = pytest.mark.usefixtures("dirs")


@pytest.mark.parametrize(
    "args, words",
    [
        (["send", "-e", "orders"], ["bodies"]),
        (["relay", "request", "GET", "/x"], ["--primary", "--secondary"]),
        (["relay", "listen"], ["--primary", "--secondary"]),
        (["relay", "request", "GET", "/x", "--primary",
          "Endpoint=sb://a.invalid/;SharedAccessKeyName=k;SharedAccessKey=s;EntityPath=hc"],
         ["--secondary"]),
        (["consumer", "status", "-e", "hub"], ["--store"]),
        (["outbox", "stats"], ["--outbox"]),
        (["postgres", "stop"], ["--data-dir"]),
        (["queue", "stats"], ["--queue"]),
        (["namespace", "down"], ["NAME"]),
        # A namespace name that is not primary, secondary, configured or existing.
        (["namespace", "down", "nosuch"], ["'nosuch'", "--new"]),
        (["drill", "--scenario", "fleet", "--store", "sqlite", "--dsn",
          "postgresql://u@127.0.0.1:1/db"], ["--dsn", "--store postgres"]),
        (["send", "-e", "orders", "--mode", "sometimes", "x"], ["--mode"]),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, list) and value
    and value[0][:1].isalpha() and value[0].islower() and len(value) > 1 else None,
)
def test_a_usage_error_exits_2_with_one_line(run: Run, monkeypatch: pytest.MonkeyPatch,
                                            args: list[str], words: list[str]) -> None:
    for name in ("GEOGATEWAY_RELAY_PRIMARY", "GEOGATEWAY_RELAY_SECONDARY",
                 "GEOGATEWAY_DRILL_DSN"):
        monkeypatch.delenv(name, raising=False)
    expect_one_line_error(run(*args), 2, *words)


def test_a_usage_error_in_a_drill_leaves_no_state_folder(run: Run, dirs: dict[str, Path]
                                                         ) -> None:
    # When the fleet drill is given a DSN for a SQLite store
    parent = dirs["tmp"] / "drills"
    parent.mkdir()
    code, _, _ = run("drill", "--scenario", "fleet", "--store", "sqlite", "--dsn",
                     "postgresql://u@127.0.0.1:1/db", "--data-dir", str(parent))
    # Then it is refused before anything runs
    assert code == 2
    assert list(parent.iterdir()) == []


class _Ran(Exception):
    """Raised by the stand-in drill: the command got as far as running it."""


@pytest.mark.parametrize("scenario, runner", [("fleet", "run_drill"),
                                              ("outbox", "run_outbox_drill")])
def test_the_environments_dsn_is_left_out_of_a_drill_on_sqlite(
    run: Run, monkeypatch: pytest.MonkeyPatch, scenario: str, runner: str,
) -> None:
    # Given a DSN in the environment (for the drills on PostgreSQL)
    import gateway.cli._drill as drill_module

    monkeypatch.setenv("GEOGATEWAY_DRILL_DSN", "postgresql://u@127.0.0.1:1/db")
    given: dict[str, object] = {}

    async def stand_in(**kwargs: object) -> None:
        given.update(kwargs)
        raise _Ran

    monkeypatch.setattr(drill_module, runner, stand_in)
    # When a drill runs on SQLite / Then it runs, without the DSN (not refused for it)
    with pytest.raises(_Ran):
        run("drill", "--scenario", scenario, "--store", "sqlite", "--json", "-")
    assert given["store"] == "sqlite" and given["dsn"] is None
