"""The status's logic: readiness, redaction, the page's escaping, content negotiation,
and a reader that shares one collection between concurrent callers."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.geo import GatewayConfig
from gateway.observability import (
    Backlog,
    GatewayStatus,
    NamespaceHealth,
    QueueHealth,
    StatusReader,
    status_page,
    wants_html,
)
from gateway.observability import _collect as collect_module
from tests.gateway.observability.serving import make_gateway

KEY = "Endpoint=sb://h/;SharedAccessKeyName=k;SharedAccessKey=TOPSECRET"


def health(name: str, state: str, reason: str | None = None) -> NamespaceHealth:
    return NamespaceHealth(name=name, preferred=name, url=f"local://{name}", kind="local",
                           role="active" if name == "primary" else "standby", state=state,
                           reason=reason)


def gateway_status(primary: str, secondary: str, queue: QueueHealth | None = None,
                   reason: str | None = None) -> GatewayStatus:
    return GatewayStatus(entity="orders", mode="passive", checked_at=0.0,
                         namespaces=(health("primary", primary, reason),
                                     health("secondary", secondary, reason)), queue=queue)


@pytest.mark.parametrize(("primary", "secondary", "writable", "ready"), [
    ("up", "up", True, True),
    ("down", "up", True, True),
    ("no answer", "up", True, True),
    ("down", "no answer", True, False),
    ("refused", "down", True, False),
    ("up", "up", False, False),
])
def test_ready_needs_one_usable_namespace_and_a_writable_queue(
        primary: str, secondary: str, writable: bool, ready: bool) -> None:
    queue = QueueHealth(path="q.db", exists=True, writable=writable,
                        reason=None if writable else "the disk is full")
    status = gateway_status(primary, secondary, queue)
    assert status.ready is ready
    assert bool(status.not_ready) is not ready
    assert status.to_json()["ready"] is ready


def test_no_queue_configured_is_no_condition() -> None:
    assert gateway_status("up", "down").ready


def test_every_text_of_the_json_and_the_page_is_redacted() -> None:
    queue = QueueHealth(path="q.db", exists=True, writable=False, reason=f"bad: {KEY}",
                        destinations=(Backlog(destination="*/orders", waiting=1, bytes=5,
                                              oldest_age_seconds=2.5, dead_letters=0,
                                              buffered_for=KEY),))
    status = gateway_status("down", "down", queue, reason=f"refused {KEY}")
    data = status.to_json()
    page = status_page(status)
    assert "TOPSECRET" not in repr(data) and "TOPSECRET" not in page
    assert "SharedAccessKey=***" in repr(data)
    assert data["durable_queue"]["oldest_age_seconds"] == 2.5


def test_the_page_escapes_what_it_shows() -> None:
    page = status_page(gateway_status("down", "up", reason="<script>alert(1)</script>"))
    assert "<script>" not in page and "&lt;script&gt;" in page


@pytest.mark.parametrize(("accept", "html"), [
    ("text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", True),
    ("application/json", False),
    ("*/*", False),
    ("", False),
    ("application/json, text/html", False),
    ("text/plain, text/html", True),
])
def test_a_browser_gets_the_page_and_a_client_the_json(accept: str, html: bool) -> None:
    assert wants_html(accept) is html


@pytest.mark.anyio
async def test_concurrent_callers_share_one_collection_and_reuse_it(
        dirs: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a reader whose collections are counted and take a moment
    calls = []
    real = collect_module.collect_status

    async def counted(*args, **kwargs):
        calls.append(1)
        await asyncio.sleep(0.05)
        return await real(*args, **kwargs)

    monkeypatch.setattr(collect_module, "collect_status", counted)
    config = GatewayConfig.load(make_gateway(dirs))
    reader = StatusReader(config, max_age=60)
    # When ten callers ask at once, then once more
    results = await asyncio.gather(*(reader.status() for _ in range(10)))
    again = await reader.status()
    # Then one collection answered them all
    assert len(calls) == 1
    assert all(r is results[0] for r in results) and again is results[0]
    # And a reader that reuses nothing collects every time
    fresh = StatusReader(config, max_age=0)
    await fresh.status()
    await fresh.status()
    assert len(calls) == 3


def test_importing_gateway_and_its_observability_loads_no_server_or_plotting_library(
        tmp_path: Path) -> None:
    script = ("import json, sys, gateway, gateway.observability, gateway.drill\n"
              "gateway.observability.GatewayStatus\n"
              "print(json.dumps(sorted(m.split('.')[0] for m in sys.modules)))")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[3], timeout=60)
    assert proc.returncode == 0, proc.stderr
    loaded = set(json.loads(proc.stdout))
    assert loaded & {"starlette", "uvicorn", "prometheus_client", "plotly"} == set()
