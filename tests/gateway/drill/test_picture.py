"""The drill as a picture: the timeline a drill records, and the page ``geogateway drill
--html`` writes, opened in real headless Chromium (Debian's ``chromium``): a
screenshot shows the failover marks (a tall column of their colour), and the DOM
after plotly.js ran holds their labels.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from gateway.drill import (
    FAILOVER_COLOUR,
    DrillReport,
    DrillTimeline,
    Scenario,
    Window,
    drill_figure,
    find_chromium,
    run_drill,
    write_html,
    write_png,
)
from gateway.drill._timeline import BUFFERED, REPLAYED
from replication import ConfigError, GatewayError
from tests.gateway.cli.cli_support import expect_one_line_error, run_process
from tests.gateway.drill.png import read_png, tallest_column_of

CHROMIUM = find_chromium()
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="Chromium is not installed (the README's test command installs it)")
#: A dashed line down the whole picture is hundreds of pixels tall; the red label
#: beside it, or the legend's swatch, much shorter.
TALL = 200
FAILOVER_LABEL = re.compile(r'class="annotation-text"[^>]*>failover \d+ ms at \d+\.\d\d s<')


def chromium(*args: str, page: Path, profile: Path) -> subprocess.CompletedProcess[str]:
    """Debian's chromium, headless, offline (no host name resolves), run here (not
    through the code under test)."""
    assert CHROMIUM is not None
    sandbox = ["--no-sandbox"] if os.geteuid() == 0 else []
    return subprocess.run(
        [CHROMIUM, "--headless", *sandbox, "--disable-gpu", "--disable-dev-shm-usage",
         f"--user-data-dir={profile}", "--virtual-time-budget=20000",
         "--host-resolver-rules=MAP * ~NOTFOUND", *args,
         page.absolute().as_uri()],
        capture_output=True, text=True, timeout=120, check=False, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> DrillReport:
    """A both-down drill: the primary's outage fails over, then both are down."""
    import anyio

    async def go() -> DrillReport:
        return await run_drill(scenario=Scenario.BOTH_DOWN, messages=200,
                               data_dir=tmp_path_factory.mktemp("drill"))

    made = anyio.run(go)
    assert made.passed and made.failovers >= 1, made
    return made


# -- the timeline ------------------------------------------------------------------------


def test_the_drill_records_what_happened_when(report: DrillReport) -> None:
    timeline = report.timeline
    assert timeline is not None
    # Every message was taken once, by a namespace or the durable queue
    sent = sum(len(v) for k, v in timeline.sent.items() if k != REPLAYED)
    assert sent == report.sent
    assert len(timeline.sent.get(BUFFERED, [])) == report.buffered
    assert len(timeline.sent.get(REPLAYED, [])) == report.replayed
    # Every delivery, from the namespace it came from
    assert sum(len(v) for v in timeline.delivered.values()) == (
        report.delivered + report.duplicates_delivered)
    assert set(timeline.delivered) <= {"primary", "secondary"}
    # The failovers of the report, the script's faults, the backlog up and back to 0
    assert [s for _, s in timeline.failovers] == report.failover_seconds
    assert [(a, ns) for _, a, ns in timeline.faults] == [
        ("down", "primary"), ("down", "secondary"), ("up", "primary"), ("up", "secondary")]
    assert max(n for _, n in timeline.backlog) > 0 and timeline.backlog[-1][1] == 0
    times = [t for _, t in timeline.failovers] + [t for t, _, _ in timeline.faults]
    assert all(0 <= t <= timeline.end for t in times)
    assert "timeline" not in report.to_dict()
    json.dumps(timeline.to_dict())


def test_outage_windows_from_the_faults() -> None:
    timeline = DrillTimeline(faults=[
        (1.0, "down", "primary"), (1.5, "down", "secondary"), (2.0, "up", "primary"),
        (2.0, "up", "secondary"), (3.0, "hang", "primary"), (3.5, "unhang", "primary"),
        (4.0, "lose", "secondary"), (5.0, "kill", "w2")], end=6.0)
    assert timeline.windows() == [
        Window("primary", "down", 1.0, 2.0), Window("secondary", "down", 1.5, 2.0),
        Window("primary", "hang", 3.0, 3.5),
        # still on when the drill ended: it ends with the drill, and is not over
        Window("secondary", "lost replies", 4.0, 6.0, ended=False)]
    assert timeline.events() == [(5.0, "kill", "w2")]


def test_a_report_without_a_timeline_has_no_picture(
        tmp_path: Path, report: DrillReport, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="no timeline"):
        write_html(dataclasses.replace(report, timeline=None), tmp_path / "x.html")
    with pytest.raises(ConfigError, match="cannot write"):
        write_html(report, tmp_path / "missing" / "x.html")
    monkeypatch.setenv("GEOGATEWAY_CHROMIUM", str(tmp_path / "no-such-browser"))
    with pytest.raises(GatewayError, match="apt-get install chromium"):
        write_png(report, tmp_path / "x.png")


# -- the page in a real browser -------------------------------------------------------------


@needs_chromium
def test_cli_drill_html_renders_in_headless_chromium_with_its_failover_marks(
        tmp_path: Path) -> None:
    # Given the page `geogateway drill --html` wrote
    page = tmp_path / "report.html"
    code, out, err = run_process("drill", "--messages", "200", "--html", str(page),
                                 "--data-dir", str(tmp_path / "drill"), "--json", "-",
                                 cwd=tmp_path)
    assert code == 0, err
    assert f"picture written to {page}" in err.replace("\n", "")
    failovers = json.loads(out)["failovers"]
    assert failovers >= 1
    html = page.read_text(encoding="utf-8")
    # It is self-contained: plotly.js inlined, no script or style to fetch
    assert len(html) > 1_000_000 and "Plotly.newPlot" in html
    assert not re.search(r"<(script|link)[^>]+(src|href)=", html)
    # When Chromium, with no network (no host resolves), opens it and runs its scripts
    dom = chromium("--dump-dom", page=page, profile=tmp_path / "profile-dom")
    # Then the plot was drawn, with one label per failover (the pixels of the marks
    # are checked on the PNG, which Chromium takes of the same page)
    assert dom.returncode == 0, dom.stderr
    assert 'class="main-svg"' in dom.stdout
    assert len(FAILOVER_LABEL.findall(dom.stdout)) == failovers
    assert "primary down" in dom.stdout


@needs_chromium
def test_png_shows_the_failover_marks_and_without_them_does_not(
        tmp_path: Path, report: DrillReport) -> None:
    # Given the PNG of a drill with failovers, and of the same drill with them removed
    with_marks = write_png(report, tmp_path / "with.png")
    assert report.timeline is not None
    bare = dataclasses.replace(report, timeline=dataclasses.replace(report.timeline,
                                                                    failovers=[]))
    without = write_png(bare, tmp_path / "without.png")
    # Then only the first has the tall column of the marks' colour
    _, _, rows = read_png(with_marks)
    assert tallest_column_of(rows, FAILOVER_COLOUR) >= TALL
    _, _, rows = read_png(without)
    assert tallest_column_of(rows, FAILOVER_COLOUR) < TALL


def test_cli_png_without_chromium_is_one_line_before_the_drill_runs(tmp_path: Path) -> None:
    result = run_process("drill", "--messages", "50", "--png", str(tmp_path / "x.png"),
                         cwd=tmp_path, env={"GEOGATEWAY_CHROMIUM": str(tmp_path / "none")})
    line = expect_one_line_error(result, 2, "--png needs Chromium", "GEOGATEWAY_CHROMIUM")
    assert "drill state" not in line and not (tmp_path / "x.png").exists()


def test_cli_relay_drills_draw_no_picture(tmp_path: Path) -> None:
    result = run_process("drill", "--scenario", "relay-outage", "--html", "x.html",
                         cwd=tmp_path)
    expect_one_line_error(result, 2, "--html, --png: only for the message scenarios")


@needs_chromium
def test_the_screenshot_helper_reports_a_browser_that_fails(tmp_path: Path) -> None:
    from gateway.drill import screenshot

    page = tmp_path / "p.html"
    page.write_text("<p>x</p>")
    false = shutil.which("false")
    assert false is not None
    with pytest.raises(GatewayError, match="could not render"):
        screenshot(false, page, tmp_path / "p.png", width=100, height=100)


def _dom(report: DrillReport, tmp_path: Path, name: str) -> str:
    """The page of ``report`` as headless Chromium has it once plotly.js drew it."""
    page = write_html(report, tmp_path / f"{name}.html")
    dom = chromium("--dump-dom", page=page, profile=tmp_path / f"profile-{name}")
    assert dom.returncode == 0, dom.stderr
    assert 'class="main-svg"' in dom.stdout
    return dom.stdout


def _panels(dom: str) -> int:
    """How many panels (plotly subplots: ``xy``, ``x2y2``...) the page drew."""
    return len(re.findall(r'<g class="subplot x\d*y\d*"', dom))


def _annotations(dom: str) -> list[str]:
    return re.findall(r'class="annotation-text"[^>]*>([^<]*)<', dom)


@needs_chromium
def test_the_picture_marks_when_each_outage_began_and_ended(
        tmp_path: Path, report: DrillReport) -> None:
    # Given a both-down drill: the primary down, then the secondary, then both back
    assert report.timeline is not None
    windows = report.timeline.windows()
    assert {w.namespace for w in windows} == {"primary", "secondary"}
    # When Chromium draws its page
    dom = _dom(report, tmp_path, "both-down")
    texts = _annotations(dom)
    # Then each outage is labelled where it began and where it ended, with the time
    for window in windows:
        assert f"{window.namespace} down" in texts, texts
        assert f"{window.namespace} back at {window.end:.2f} s" in texts, texts
    # And the backlog had something to show (both were down), the duplicates maybe
    assert _panels(dom) == 2 + bool(report.timeline.duplicates)


def _figure_panels(report: DrillReport) -> tuple[int, str]:
    """How many panels (y axes) the figure of ``report`` has, and its text as JSON."""
    fig = drill_figure(report)
    axes = [key for key in fig.layout.to_plotly_json() if key.startswith("yaxis")]
    return len(axes), fig.to_json()


def test_panels_with_nothing_to_show_are_left_out(report: DrillReport) -> None:
    # Given the same drill as if nothing had been buffered nor suppressed
    # (what Chromium draws of a figure: test_the_picture_marks_when_each_outage_began_...)
    assert report.timeline is not None
    bare = dataclasses.replace(report, timeline=dataclasses.replace(
        report.timeline, backlog=[], duplicates=[]))
    no_duplicates = dataclasses.replace(report, timeline=dataclasses.replace(
        report.timeline, duplicates=[]))
    # Then its picture is the message rates alone, with no empty panel below
    panels, text = _figure_panels(bare)
    assert panels == 1
    assert "durable queue backlog" not in text and "duplicates suppressed (total)" not in text
    # And with a backlog but no duplicates, two
    panels, text = _figure_panels(no_duplicates)
    assert panels == 2 and "durable queue backlog" in text
    assert "duplicates suppressed (total)" not in text
