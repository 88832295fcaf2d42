"""``geogateway drill``."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from gateway.cli import err, out, print_table, run
from gateway.drill import TRANSPORTS, DrillReport, Scenario, run_drill


def register(group: click.Group) -> None:
    group.add_command(drill)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f} s"


def show_report(report: DrillReport) -> None:
    failover = report.failover_seconds
    rows = [
        ("scenario", report.scenario), ("mode", report.mode),
        ("transport", report.transport),
        ("sent", report.sent), ("delivered", report.delivered),
        ("lost", report.lost), ("duplicates delivered", report.duplicates_delivered),
        ("duplicates suppressed", report.duplicates_suppressed),
        ("buffered", report.buffered), ("replayed", report.replayed),
        ("failovers", report.failovers),
        ("failover time", ", ".join(_seconds(s) for s in failover) if failover else "-"),
        ("role swaps", report.role_swaps),
        ("replay time", _seconds(report.replay_seconds)),
        ("elapsed", _seconds(report.elapsed_seconds)),
        ("result", "PASS" if report.passed else "FAIL (lost or duplicates delivered)"),
    ]
    print_table("geogateway failover drill", ("", "value"), rows)


@click.command()
@click.option("--mode", type=click.Choice(["passive", "active"]), default=None,
              help="Replication mode of the sender [default: passive; active for the "
                   "consumer-* scenarios].")
@click.option("--messages", type=click.IntRange(min=1), default=10_000, show_default=True,
              help="How many messages to send.")
@click.option("--scenario", type=click.Choice([s.value for s in Scenario]),
              default=Scenario.PRIMARY_OUTAGE.value, show_default=True,
              help="What fails while messages flow.")
@click.option("--batch", "batch_size", type=click.IntRange(min=1, max=1000), default=1,
              show_default=True, help="Messages per send call.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the report as JSON to this file ('-' for stdout only).")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path),
              help="Make the run's state folder (its namespaces, queue, dedup store) in "
                   "this directory, a new one per run [default: the temporary dir].")
@click.option("--keep", is_flag=True,
              help="Keep the state folder when the drill passes (it is always kept when "
                   "the drill fails).")
@click.option("--settle-timeout", type=click.FloatRange(min=1), default=60.0, show_default=True,
              help="Seconds to wait for replay and delivery after the last send.")
@click.option("--transport", type=click.Choice(TRANSPORTS), default="local", show_default=True,
              help="local: the embedded namespaces; servicebus / eventhubs: the Azure SDK "
                   "transports against two emulated namespaces the drill starts.")
def drill(mode: str | None, messages: int, scenario: str, batch_size: int, json_path: Path | None,
          data_dir: Path | None, keep: bool, settle_timeout: float, transport: str) -> None:
    """Run a failover drill on two namespaces and print the report.

    Exits 0 only when nothing was lost and no duplicate was delivered. Each run has a
    new state folder, printed first; it is removed when the drill passes.
    """
    quiet = json_path is not None and str(json_path) == "-"
    with Progress(
        TextColumn("{task.description:<10}"), BarColumn(), MofNCompleteColumn(),
        TimeElapsedColumn(), console=err, transient=True, disable=quiet or not err.is_terminal,
    ) as bar:
        tasks: dict[str, TaskID] = {}

        def progress(phase: str, done: int, total: int) -> None:
            if phase not in tasks:
                tasks[phase] = bar.add_task(phase, total=total)
            bar.update(tasks[phase], completed=done)

        report = run(run_drill(
            mode=mode, scenario=scenario, messages=messages, batch_size=batch_size,
            data_dir=data_dir, settle_timeout=settle_timeout, progress=progress,
            transport=transport, keep_state=keep,
            on_state_dir=lambda path: err.print(f"drill state: {path}", markup=False),
        ))
    if report.state_dir is None:
        err.print("drill passed: its state folder was removed")
    else:
        err.print(f"drill state kept in {report.state_dir}", markup=False)
    if quiet:
        click.echo(json.dumps(report.to_dict(), indent=2))
    else:
        show_report(report)
        if json_path is not None:
            json_path.write_text(json.dumps(report.to_dict(), indent=2) + "\n")
            out.print(f"report written to {json_path}")
    if not report.passed:
        raise SystemExit(1)
