"""Benchmark the start-up time of the ``geogateway`` command.

    .venv/bin/python benchmarks/bench_startup.py [--runs 21] [--before DIR]

Runs each command as a fresh process ``--runs`` times, round-robin (so a burst of
load on the shared machine hits every command alike), and prints the median, min and
max wall time, and the median over the reference in the same run: ``python -c pass``
on the same interpreter, the floor no Python command can go under. Rows:

* ``geogateway --help``: the target is <= 0.1 s over ``python -c pass`` (median over
  median, issue 21); ``geogateway namespace down|up primary`` (in a temporary data
  directory): <= 0.25 s of wall time each;
* ``python -c "import click"``: the floor of any click command, for scale;
* ``python -c "import gateway"`` and ``import gateway.cli``;
* for scale, what the command cost when every subcommand's module was imported at
  start-up (as before the lazy imports): ``import gateway.cli`` plus loading every
  subcommand, which brings in the Azure SDKs, aiohttp, rich and sqlite-utils;
* with ``--before DIR`` (a tree of an older geogateway, e.g. ``git archive COMMIT
  gateway replication durable_queue | tar -x -C DIR``), its ``--help`` and
  ``namespace down primary`` too, run as ``python -m gateway.cli`` from that tree.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

TARGET_S = 0.25  # namespace down|up: wall time
HELP_OVER_S = 0.1  # --help: over python -c pass
ROOT = Path(__file__).resolve().parents[1]


# What a row is held to: None, TARGET_S of wall time ("abs"), or HELP_OVER_S over the
# reference ("over").
Held = str | None


def commands(data_dir: str, before: Path | None) -> dict[str, tuple[list[str], Held]]:
    """name -> (argv, the target it is held to)."""
    python = sys.executable
    script = Path(python).with_name("geogateway")
    geogateway = [str(script)] if script.exists() else [python, "-m", "gateway.cli"]
    old: dict[str, tuple[list[str], Held]] = {}
    if before is not None:
        # -c with sys.path first: that tree's packages, not this installation's.
        run_old = [python, "-c", f"import sys; sys.path.insert(0, {str(before)!r}); "
                   "from gateway.cli import main; sys.exit(main())"]
        old = {
            "before: geogateway --help": ([*run_old, "--help"], "over"),
            "before: geogateway namespace down primary": (
                [*run_old, "namespace", "down", "primary", "--data-dir", data_dir], "abs"),
        }
    return {
        "python -c pass (reference)": ([python, "-c", "pass"], None),
        'python -c "import click" (floor of a click command)': (
            [python, "-c", "import click"], None),
        "geogateway --help": ([*geogateway, "--help"], "over"),
        "geogateway namespace down primary": (
            [*geogateway, "namespace", "down", "primary", "--data-dir", data_dir], "abs"),
        "geogateway namespace up primary": (
            [*geogateway, "namespace", "up", "primary", "--data-dir", data_dir], "abs"),
        'python -c "import gateway"': ([python, "-c", "import gateway"], None),
        'python -c "import gateway.cli"': ([python, "-c", "import gateway.cli"], None),
        "every subcommand imported (the eager start-up)": (
            [python, "-c", "from gateway.cli import COMMANDS, cli\n"
             "for name in COMMANDS: cli.get_command(None, name)"], None),
        **old,
    }


def time_once(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                   cwd=ROOT, check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=21, help="Runs of each command.")
    parser.add_argument("--before", type=Path, help="A tree of an older geogateway.")
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GEOGATEWAY_")}
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        data_dir = str(Path(tmp) / "data")
        table = commands(data_dir, args.before)
        env["GEOGATEWAY_STATE_DIR"] = str(Path(tmp) / "state")
        for argv, _ in table.values():  # warm the page cache and byte-code caches
            time_once(argv, env)
        times: dict[str, list[float]] = {name: [] for name in table}
        for _ in range(args.runs):
            for name, (argv, _) in table.items():
                times[name].append(time_once(argv, env))
    report(times, {name: held for name, (_, held) in table.items()}, args.runs)


def verdict(held: Held, median: float, over: float) -> str:
    """The target a row is held to, and whether it met it."""
    if held is None:
        return "-"
    if held == "over":
        return f"+<= {HELP_OVER_S:.2f} s: " + ("PASS" if over <= HELP_OVER_S else "FAIL")
    return f"<= {TARGET_S:.2f} s: " + ("PASS" if median <= TARGET_S else "FAIL")


def report(times: dict[str, list[float]], held: dict[str, Held], runs: int) -> None:
    reference = statistics.median(times["python -c pass (reference)"])
    out = Table(title=f"geogateway start-up, median of {runs} runs "
                f"(python {sys.version.split()[0]})", title_justify="left")
    for column in ("command", "median", "min", "max", "over python -c pass", "x python",
                   "target"):
        out.add_column(column, justify="left" if column == "command" else "right")
    for name, values in times.items():
        median = statistics.median(values)
        out.add_row(name, f"{median * 1000:.0f} ms", f"{min(values) * 1000:.0f} ms",
                    f"{max(values) * 1000:.0f} ms", f"+{(median - reference) * 1000:.0f} ms",
                    f"{median / reference:.1f}x", verdict(held[name], median, median - reference))
    Console(width=140).print(out)


if __name__ == "__main__":
    main()
