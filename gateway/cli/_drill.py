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

from gateway.cli._common import err, out, print_table, run
from gateway.drill import (
    FIRST_ANSWER_TARGET,
    HUNG_SEND_LIMIT,
    TRANSPORTS,
    DrillReport,
    RelayDrillReport,
    RelayScenario,
    Scenario,
    run_drill,
    run_relay_drill,
)


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
        ("result", "PASS" if report.passed else "FAIL (lost or duplicates delivered)"
         if report.lost or report.duplicates_delivered else
         "FAIL (delivered out of order)" if report.out_of_order else
         f"FAIL (sends while hung took over {HUNG_SEND_LIMIT:g} s at p99)"),
    ]
    if report.per_session:
        rows[7:7] = [("out of order", report.out_of_order),
                     ("sessions", len(report.per_session)),
                     ("session gaps", report.session_gaps)]
    if report.hung_send_seconds:
        rows[-1:-1] = [
            ("sends while hung", len(report.hung_send_seconds)),
            ("first send after hang", _seconds(report.hung_send_seconds[0])),
            ("sends while hung p99", _seconds(report.hung_send_p99)),
        ]
    print_table("geogateway failover drill", ("", "value"), rows)
    if report.per_session:
        columns = ("sent", "delivered", "lost", "duplicates_delivered", "out_of_order")
        print_table("per session", ("session", *(c.replace("_", " ") for c in columns)),
                    [(name, *(row[c] for c in columns))
                     for name, row in sorted(report.per_session.items())])


def show_relay_report(report: RelayDrillReport) -> None:
    failover = report.failover_seconds
    rows = [
        ("scenario", report.scenario), ("requests sent", report.sent),
        ("answered", report.answered),
        ("answered by", ", ".join(f"{ns} {n}" for ns, n in sorted(report.answered_by.items()))),
        ("failed", report.failed), ("failed idempotent", report.failed_idempotent),
        ("failovers", report.failovers),
        ("failover time", ", ".join(_seconds(s) for s in failover) if failover else "-"),
        ("role swaps", report.role_swaps),
    ]
    if report.first_answer_seconds:
        rows.append(("first answer after hang", f"p99 {_seconds(report.first_answer_p99)} "
                     f"over {len(report.first_answer_seconds)} hangs "
                     f"(target <= {_seconds(FIRST_ANSWER_TARGET)})"))
    why = ("an idempotent request got no answer" if report.failed_idempotent
           or report.answered + report.failed != report.sent
           else "the first answer after a hang was too slow")
    rows += [("elapsed", _seconds(report.elapsed_seconds)),
             ("result", "PASS" if report.passed else f"FAIL ({why})")]
    print_table("geogateway relay failover drill", ("", "value"), rows)


_RELAY_SCENARIOS = {s.value for s in RelayScenario}
# Options of the message drills that a relay drill has no use for, and the reverse.
_MESSAGE_ONLY = ("mode", "messages", "batch_size", "transport")


def _check_options(ctx: click.Context, scenario: str) -> None:
    given = {name for name in (*_MESSAGE_ONLY, "requests")
             if ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT}
    relay = scenario in _RELAY_SCENARIOS
    wrong = sorted(given & set(_MESSAGE_ONLY)) if relay else sorted(given & {"requests"})
    if wrong:
        options = ", ".join("--" + name.replace("_size", "").replace("_", "-") for name in wrong)
        kind = "message" if relay else "relay"
        raise click.UsageError(f"{options}: only for the {kind} scenarios; {scenario} does "
                               "not use it")


@click.command()
@click.option("--mode", type=click.Choice(["passive", "active"]), default=None,
              help="Replication mode of the sender [default: passive; active for the "
                   "consumer-* scenarios].")
@click.option("--messages", type=click.IntRange(min=1), default=10_000, show_default=True,
              help="How many messages to send.")
@click.option("--requests", type=click.IntRange(min=1), default=300, show_default=True,
              help="How many HTTP requests a relay-* scenario sends.")
@click.option("--scenario", type=click.Choice([*(s.value for s in Scenario),
                                               *(s.value for s in RelayScenario)]),
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
@click.pass_context
def drill(ctx: click.Context, mode: str | None, messages: int, requests: int, scenario: str,
          batch_size: int, json_path: Path | None, data_dir: Path | None, keep: bool,
          settle_timeout: float, transport: str) -> None:
    """Run a failover drill on two namespaces and print the report.

    Exits 0 only when nothing was lost and no duplicate was delivered (relay-*
    scenarios: when every idempotent request got an answer). Each run has a new state
    folder, printed first; it is removed when the drill passes.
    """
    _check_options(ctx, scenario)
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

        def on_state_dir(path: Path) -> None:
            err.print(f"drill state: {path}", markup=False)

        report: DrillReport | RelayDrillReport
        if scenario in _RELAY_SCENARIOS:
            report = run(run_relay_drill(scenario=scenario, requests=requests,
                                         data_dir=data_dir, keep_state=keep,
                                         on_state_dir=on_state_dir, progress=progress))
        else:
            report = run(run_drill(
                mode=mode, scenario=scenario, messages=messages, batch_size=batch_size,
                data_dir=data_dir, settle_timeout=settle_timeout, progress=progress,
                transport=transport, keep_state=keep, on_state_dir=on_state_dir,
            ))
    if report.state_dir is None:
        err.print("drill passed: its state folder was removed")
    else:
        err.print(f"drill state kept in {report.state_dir}", markup=False)
    if quiet:
        click.echo(json.dumps(report.to_dict(), indent=2))
    else:
        if isinstance(report, RelayDrillReport):
            show_relay_report(report)
        else:
            show_report(report)
        if json_path is not None:
            json_path.write_text(json.dumps(report.to_dict(), indent=2) + "\n")
            out.print(f"report written to {json_path}")
    if not report.passed:
        raise SystemExit(1)
