"""The drill as a picture: ``geogateway drill --html FILE`` and ``--png FILE``.

Drawn with plotly from the drill's :class:`~gateway.drill._timeline.DrillTimeline`,
on one time axis: messages sent and delivered per second per namespace (and into and
out of the durable queue), each outage window shaded (a namespace down, hung, or
losing replies) with its start and its end marked and labelled, each failover marked
by a vertical line labelled with its duration, and, below, the durable queue's
backlog and the duplicates suppressed so far (each panel only when it has something
to show: a drill that buffered nothing has no backlog panel).

The HTML page is self-contained: plotly.js is inlined, nothing is fetched, so it
opens offline and can be archived with the drill's report. The PNG is that page as
headless Chromium renders it (``--headless --screenshot``): the same picture, no
second renderer; Chromium (or Chrome) must be installed, found on ``PATH`` or named
by ``$GEOGATEWAY_CHROMIUM``. plotly is the ``picture`` extra.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gateway.drill._report import DrillReport
from gateway.drill._timeline import BUFFERED, REPLAYED, DrillTimeline
from replication import ConfigError, GatewayError

if TYPE_CHECKING:
    from plotly.graph_objects import Figure

__all__ = ["CHROMIUM_NAMES", "FAILOVER_COLOUR", "drill_figure", "find_chromium", "write_html",
           "write_png"]

#: The colour of the failover marks (and of nothing else in the picture).
FAILOVER_COLOUR = "#d62728"
#: Executables tried, in order, for ``--png`` (after ``$GEOGATEWAY_CHROMIUM``).
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable",
                  "chrome", "headless_shell")
_COLOURS = {"primary": "#1f77b4", "secondary": "#ff7f0e", BUFFERED: "#7f7f7f",
            REPLAYED: "#2ca02c"}
_OTHER_COLOURS = ("#9467bd", "#8c564b", "#17becf", "#bcbd22")
_DUPLICATES_COLOUR = "#e377c2"
_WINDOW_TEXT = {"down": "{} down", "hang": "{} hung", "lost replies": "{} loses replies"}
_WINDOW_END_TEXT = {"down": "{} back at {:.2f} s", "hang": "{} answers again at {:.2f} s",
                    "lost replies": "{} replies again at {:.2f} s"}
#: The panels' heights, by how many there are (the message rates first).
_ROW_HEIGHTS = {1: [1.0], 2: [0.72, 0.28], 3: [0.56, 0.24, 0.2]}
_PANEL_TITLES = {"rates": "", "backlog": "durable queue backlog (messages waiting)",
                 "duplicates": "duplicates suppressed (total)"}
_WIDTH, _HEIGHT = 1400, 950


def _colour(name: str, known: dict[str, str]) -> str:
    if name not in known:
        known[name] = _OTHER_COLOURS[len(known) % len(_OTHER_COLOURS)]
    return known[name]


def _bin_width(end: float) -> float:
    # About 80 bins over the run, at least 50 ms each: a rate per second that shows the
    # dip of a failover without drowning in noise.
    return max(0.05, round(end / 80, 2))


def _rates(times: list[float], width: float, end: float) -> tuple[list[float], list[float]]:
    bins = int(end / width) + 1
    counts = [0] * bins
    for t in times:
        counts[min(bins - 1, max(0, int(t / width)))] += 1
    return [round(i * width, 3) for i in range(bins)], [c / width for c in counts]


def _title(report: DrillReport) -> str:
    result = "PASS" if report.passed else "FAIL"
    return (f"geogateway drill: {report.scenario}, {report.mode}, {report.transport}: "
            f"<b>{result}</b><br><sup>{report.sent} sent, {report.delivered} delivered, "
            f"{report.lost} lost, {report.duplicates_delivered} duplicates delivered, "
            f"{report.duplicates_suppressed} suppressed, {report.buffered} buffered, "
            f"{report.failovers} failover(s)</sup>")


def drill_figure(report: DrillReport) -> Figure:
    """The drill's picture as a plotly figure.

    Raises:
        ConfigError: the report has no timeline (made by an older version, or a
            relay drill).
        ImportError: plotly is not installed (``pip install 'geogateway[picture]'``).
    """
    timeline = report.timeline
    if timeline is None:
        raise ConfigError("this drill report has no timeline to draw: run the drill with "
                          "--html or --png")
    try:
        from plotly.subplots import make_subplots
    except ImportError as exc:  # pragma: no cover - the extra is part of the test install
        raise ImportError("the drill's picture needs plotly: pip install "
                          "'geogateway[picture]'") from exc
    panels = _panels(timeline)
    fig = make_subplots(
        rows=len(panels), cols=1, shared_xaxes=True, vertical_spacing=0.07,
        row_heights=_ROW_HEIGHTS[len(panels)],
        subplot_titles=[_PANEL_TITLES[panel] for panel in panels])
    end = max(timeline.end, 0.001)
    _message_rates(fig, timeline, end)
    if "backlog" in panels:
        _backlog(fig, timeline, end, row=panels.index("backlog") + 1)
    if "duplicates" in panels:
        _duplicates(fig, timeline, end, row=panels.index("duplicates") + 1)
    _windows(fig, timeline)
    _events(fig, timeline)
    _failovers(fig, timeline)
    fig.update_layout(
        title={"text": _title(report), "x": 0.01}, template="plotly_white", height=_HEIGHT,
        legend={"orientation": "h", "y": -0.07, "x": 0}, margin={"t": 110, "r": 30},
        hovermode="x unified")
    fig.update_xaxes(title_text="seconds since the drill started", row=len(panels), col=1)
    fig.update_xaxes(range=[0, end])
    return fig


def _message_rates(fig: Any, timeline: DrillTimeline, end: float) -> None:
    import plotly.graph_objects as go

    width = _bin_width(end)
    colours = dict(_COLOURS)
    for kind, series in (("sent to", timeline.sent),
                         (timeline.delivered_label, timeline.delivered)):
        # A replay sends the backlog at once: its burst would flatten every other line
        # here. It shows as the backlog's fall below, and in the deliveries.
        names = sorted(set(series) - {REPLAYED}, key=lambda n: (n == BUFFERED, n))
        for i, name in enumerate(names):
            x, y = _rates(series[name], width, end)
            label = "buffered" if name == BUFFERED else f"{kind} {name}"
            # The first line drawn is wider: in active mode the namespaces take the same
            # messages, and the second line would hide it entirely.
            fig.add_trace(go.Scatter(
                x=x, y=y, name=label, mode="lines", line_shape="hv",
                line={"color": _colour(name, colours), "width": 4 if i == 0 else 2,
                      "dash": "solid" if kind == "sent to" else "dot"}), row=1, col=1)
    fig.update_yaxes(title_text="messages per second", rangemode="tozero", row=1, col=1)


def _panels(timeline: DrillTimeline) -> list[str]:
    """The panels with something to show: the message rates always; the durable
    queue's backlog when anything waited in it; the duplicates when any was suppressed."""
    panels = ["rates"]
    if any(waiting for _, waiting in timeline.backlog):
        panels.append("backlog")
    if timeline.duplicates:
        panels.append("duplicates")
    return panels


def _backlog(fig: Any, timeline: DrillTimeline, end: float, *, row: int) -> None:
    import plotly.graph_objects as go

    points = [(0.0, 0), *timeline.backlog, (end, timeline.backlog[-1][1])]
    fig.add_trace(go.Scatter(
        x=[round(t, 3) for t, _ in points], y=[n for _, n in points], name="backlog",
        mode="lines", line_shape="hv", fill="tozeroy", line={"color": "#7f7f7f"}),
        row=row, col=1)
    fig.update_yaxes(rangemode="tozero", row=row, col=1)


def _duplicates(fig: Any, timeline: DrillTimeline, end: float, *, row: int) -> None:
    import plotly.graph_objects as go

    times = sorted(timeline.duplicates)
    fig.add_trace(go.Scatter(
        x=[0.0, *(round(t, 3) for t in times), end], y=[0, *range(1, len(times) + 1), len(times)],
        name="duplicates suppressed", mode="lines", line_shape="hv",
        line={"color": _DUPLICATES_COLOUR}), row=row, col=1)
    fig.update_yaxes(rangemode="tozero", row=row, col=1)


def _windows(fig: Any, timeline: DrillTimeline) -> None:
    """Each outage shaded, with a line and a label where it began and where it ended
    (one still open when the drill ended is not labelled as over)."""
    colours = dict(_COLOURS)
    for window in timeline.windows():
        colour = _colour(window.namespace, colours)
        fig.add_vrect(x0=window.start, x1=window.end, fillcolor=colour, opacity=0.13,
                      line_width=0, layer="below", row="all", col=1)
        y = 1.0 if window.namespace == "primary" else 0.975
        marks = [(window.start, _WINDOW_TEXT[window.kind].format(window.namespace))]
        if window.ended:
            marks.append((window.end, _WINDOW_END_TEXT[window.kind].format(
                window.namespace, window.end)))
        for at, text in marks:
            fig.add_shape(type="line", x0=at, x1=at, xref="x", y0=0, y1=y, yref="paper",
                          line={"color": colour, "width": 1.5, "dash": "dot"})
            fig.add_annotation(
                x=at, y=y, xref="x", yref="paper", xanchor="left", yanchor="bottom",
                showarrow=False, text=text, font={"color": colour, "size": 12})


_EVENT_TEXT = {"kill": "{} killed (SIGKILL)", "term": "{} stopped (SIGTERM)",
               "start": "{} started"}


def _events(fig: Any, timeline: DrillTimeline) -> None:
    for at, action, name in timeline.events():
        fig.add_shape(type="line", x0=at, x1=at, xref="x", y0=0, y1=1, yref="paper",
                      line={"color": "#555555", "width": 2, "dash": "dot"})
        fig.add_annotation(
            x=at, y=1.0, xref="x", yref="paper", xanchor="left", yanchor="bottom",
            showarrow=False, text=_EVENT_TEXT[action].format(name),
            font={"color": "#555555", "size": 12})


def _failovers(fig: Any, timeline: DrillTimeline) -> None:
    import plotly.graph_objects as go

    for at, seconds in timeline.failovers:
        fig.add_shape(type="line", x0=at, x1=at, xref="x", y0=0, y1=1, yref="paper",
                      line={"color": FAILOVER_COLOUR, "width": 3, "dash": "dash"})
        fig.add_annotation(
            x=at, y=0.97, xref="x", yref="paper", xanchor="left", yanchor="top",
            textangle=-90, showarrow=False, bgcolor="rgba(255,255,255,0.85)",
            text=f"failover {seconds * 1000:.0f} ms at {at:.2f} s",
            font={"color": FAILOVER_COLOUR, "size": 13})
    if timeline.failovers:  # the marks' entry in the legend
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", name="failover",
                                 line={"color": FAILOVER_COLOUR, "dash": "dash", "width": 3}))


def write_html(report: DrillReport, path: str | os.PathLike[str], *,
               toolbar: bool = True) -> Path:
    """Write the drill's picture as a self-contained HTML page (plotly.js inlined).

    Args:
        report: the drill's report, with its timeline.
        path: the file to write.
        toolbar: show plotly's zoom and pan buttons.

    Raises:
        ConfigError: no timeline (see :func:`drill_figure`); ``path`` cannot be written.
    """
    target = Path(path)
    fig = drill_figure(report)
    try:
        fig.write_html(target, include_plotlyjs=True, full_html=True, div_id="drill",
                       config={"displaylogo": False, "responsive": True,
                               "displayModeBar": toolbar})
    except OSError as exc:
        raise ConfigError(f"cannot write {target}: {exc.strerror or exc}; choose another "
                          "file") from None
    return target


def find_chromium() -> str | None:
    """The Chromium (or Chrome) to render with: ``$GEOGATEWAY_CHROMIUM``, else the first
    of :data:`CHROMIUM_NAMES` on ``PATH``; ``None`` when there is none."""
    named = os.environ.get("GEOGATEWAY_CHROMIUM")
    if named:
        return shutil.which(named)
    return next((found for name in CHROMIUM_NAMES if (found := shutil.which(name))), None)


def write_png(report: DrillReport, path: str | os.PathLike[str], *,
              chromium: str | None = None, timeout: float = 120.0) -> Path:
    """Write the drill's picture as a PNG: its HTML page, screenshot by headless Chromium.

    Raises:
        GatewayError: no Chromium to render with (what to install), or it failed.
        ConfigError: no timeline; ``path`` cannot be written.
    """
    browser = chromium or find_chromium()
    if browser is None:
        raise GatewayError("--png needs Chromium to render the picture: install it "
                           "(Debian: apt-get install chromium) or name it in "
                           "$GEOGATEWAY_CHROMIUM; --html FILE needs no browser")
    target = Path(path).absolute()
    with tempfile.TemporaryDirectory(prefix="geogateway-picture-") as work:
        page = write_html(report, Path(work) / "drill.html", toolbar=False)
        shot = Path(work) / "drill.png"
        screenshot(browser, page, shot, width=_WIDTH, height=_HEIGHT + 20, timeout=timeout)
        try:
            shutil.copyfile(shot, target)
        except OSError as exc:
            raise ConfigError(f"cannot write {target}: {exc.strerror or exc}; choose "
                              "another file") from None
    return target


def screenshot(browser: str, page: Path, png: Path, *, width: int, height: int,
               timeout: float = 120.0) -> None:
    """Render ``page`` with headless ``browser`` (scripts run first) into ``png``.

    Raises:
        GatewayError: the browser failed, or wrote no image.
    """
    with tempfile.TemporaryDirectory(prefix="geogateway-chromium-") as profile:
        command = [
            browser, "--headless", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
            "--disable-dev-shm-usage", "--mute-audio", f"--user-data-dir={profile}",
            f"--window-size={width},{height}", "--virtual-time-budget=20000",
            f"--screenshot={png}", page.absolute().as_uri(),
        ]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            command.insert(1, "--no-sandbox")  # Chromium refuses its sandbox as root
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                                  stdin=subprocess.DEVNULL, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise GatewayError(f"{browser} could not render the picture: {exc}") from None
    if done.returncode != 0 or not png.is_file() or png.stat().st_size == 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise GatewayError(f"{browser} could not render the picture (exit {done.returncode}): "
                           f"{last}")
