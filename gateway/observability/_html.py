"""The small HTML page of ``/status``: the same data as the JSON, as tables.

No script and nothing fetched from elsewhere; it refreshes itself every few seconds.
Every value is escaped, and it is made from the redacted JSON form of the status.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from gateway.observability._status import GatewayStatus

__all__ = ["status_page"]

_STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.3em; } h2 { font-size: 1.05em; margin-top: 1.5em; }
table { border-collapse: collapse; } th, td { padding: .25em .8em; text-align: left; }
th { background: #eee; } tr:nth-child(even) td { background: #fafafa; }
.ok { color: #1a7f37; font-weight: 600; } .bad { color: #c62828; font-weight: 600; }
.note { color: #666; }
"""


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    return html.escape(str(value))


def _table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _flag(good: bool, text: str) -> str:
    return f'<span class="{"ok" if good else "bad"}">{html.escape(text)}</span>'


def status_page(status: GatewayStatus, *, refresh: int = 5) -> str:
    """The status as a self-contained HTML page that reloads every ``refresh`` seconds."""
    data = status.to_json()
    parts = [
        f"<h1>geogateway: {html.escape(data['entity'])} ({html.escape(data['mode'])})</h1>",
        "<p>" + _flag(data["ready"], "ready" if data["ready"] else "NOT READY")
        + f" <span class=note>checked {html.escape(data['checked_at'])}</span></p>",
    ]
    parts += [f"<p class=bad>{html.escape(r)}</p>" for r in data["not_ready"]]
    parts += ["<h2>Namespaces</h2>", _table(
        ("namespace", "configured as", "role", "state", "probe (s)", "url", "why"),
        [(_cell(n["name"]), _cell(n["preferred"]), _cell(n["role"]),
          _flag(n["usable"], n["state"]), _cell(n["probe_seconds"]), _cell(n["url"]),
          _cell(n["reason"])) for n in data["namespaces"]])]
    queue = data["durable_queue"]
    if queue is not None:
        parts += [
            "<h2>Durable queue</h2>",
            f"<p>{_cell(queue['path'])}: "
            + _flag(queue["writable"], "writable" if queue["writable"] else "NOT WRITABLE")
            + f", {queue['waiting']} waiting, oldest {_cell(queue['oldest_age_seconds'])} s"
            + (f" <span class=bad>{_cell(queue['reason'])}</span>" if queue["reason"] else "")
            + "</p>",
            _table(("destination", "waiting", "bytes", "oldest (s)", "dead-lettered",
                    "buffered for"),
                   [tuple(_cell(d[k]) for k in ("destination", "waiting", "bytes",
                                                "oldest_age_seconds", "dead_letters",
                                                "buffered_for"))
                    for d in queue["destinations"]]),
        ]
    consumers = data["consumers"]
    if consumers is not None:
        parts.append(f"<h2>Consumer group {_cell(consumers['consumer_group'])} "
                     f"({_cell(consumers['store'])})</h2>")
        if consumers["error"]:
            parts.append(f"<p class=bad>{_cell(consumers['error'])}</p>")
        rows = [(_cell(p["namespace"]), _cell(p["partition"]), _cell(p["owner"]),
                 _cell(p["lease_age_seconds"]),
                 "-" if p["owner_alive"] is None else _flag(p["owner_alive"],
                                                             "yes" if p["owner_alive"] else "NO"),
                 _cell(p["checkpoint_sequence_number"]), _cell(p["lag"]))
                for ns in consumers["namespaces"] for p in ns["partitions"]]
        parts.append(_table(("namespace", "partition", "owner", "lease age (s)", "owner alive",
                             "checkpoint", "lag"), rows))
        parts += [f"<p class=note>{_cell(note)}</p>"
                  for ns in consumers["namespaces"] for note in ns["notes"]]
    parts += [f"<p class=note>{_cell(note)}</p>" for note in data["notes"]]
    return (
        "<!doctype html><html><head><meta charset=utf-8>"
        f'<meta http-equiv="refresh" content="{int(refresh)}">'
        f"<title>geogateway status</title><style>{_STYLE}</style></head><body>"
        + "\n".join(parts) + "</body></html>\n"
    )
