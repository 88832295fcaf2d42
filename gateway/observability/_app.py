"""The health and status ASGI app (starlette): ``/healthz``, ``/readyz``, ``/metrics``,
``/status`` and ``/status.html``.

Served by ``geogateway serve`` (uvicorn), or mounted in an application's own ASGI
app: it needs no lifespan (each probe opens and closes its own transport), so a
``Mount("/ops", app=create_app(...))`` works as it is.

* ``/healthz``: 200 while the process answers.
* ``/readyz``: 200 when at least one namespace is usable and the durable queue (when
  one is configured) is writable; 503 with the reasons otherwise.
* ``/metrics``: the Prometheus registry (:func:`metrics_exposition`).
* ``/status``: JSON, or the HTML page for a client that asks for ``text/html`` first
  (a browser); ``/status.html`` is always the page.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from gateway.geo import GatewayConfig
from gateway.observability._collect import DEFAULT_PROBE_DEADLINE, StatusReader, StoreLike
from gateway.observability._html import status_page
from gateway.observability._metrics import render_metrics

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response

__all__ = ["create_app", "metrics_exposition", "wants_html"]


def metrics_exposition(registry: CollectorRegistry | None = None) -> tuple[bytes, str]:
    """The Prometheus text exposition of ``registry`` (the global registry by default),
    and its content type: what ``/metrics`` answers (:func:`render_metrics`, by which
    the app's ``/metrics`` and a ``/metrics`` of the application's own answer alike)."""
    return render_metrics(registry)


def wants_html(accept: str) -> bool:
    """Whether an ``Accept`` header asks for HTML before JSON (a browser does)."""
    for item in accept.split(","):
        kind = item.split(";")[0].strip().lower()
        if kind in ("text/html", "application/xhtml+xml"):
            return True
        if kind in ("application/json", "*/*", "application/*"):
            return False
    return False


def create_app(
    config: GatewayConfig | str | os.PathLike[str],
    *,
    checkpoint_store: StoreLike | None = None,
    consumer_group: str = "$Default",
    probe_deadline: float = DEFAULT_PROBE_DEADLINE,
    max_age: float = 1.0,
    registry: CollectorRegistry | None = None,
) -> Starlette:
    """The health and status app for a gateway configuration (see the module docstring).

    Args:
        config: a :class:`~gateway.geo.GatewayConfig`, or the path of its TOML file
            (read as ``GatewayConfig.load`` reads it, ``GEOGATEWAY_*`` env included).
        checkpoint_store: the partition consumers' store (an open
            :class:`~gateway.consumer.CheckpointStore`, or a SQLite store's path,
            opened read-only): ``/status`` then shows partition owners and lag.
        consumer_group: the consumers' group.
        probe_deadline: seconds each namespace has to answer a probe.
        max_age: seconds a status is reused by the next request (probes are not
            repeated for every scrape).
        registry: the Prometheus registry ``/metrics`` shows (default: the global one,
            where geogateway's metrics hooks register).

    Raises:
        ConfigError: a bad configuration file.
        ImportError: starlette is not installed (``pip install 'geogateway[serve]'``).
    """
    try:
        from starlette.applications import Starlette
        from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
        from starlette.routing import Route
    except ImportError as exc:  # pragma: no cover - the extra is part of the test install
        raise ImportError("the status app needs starlette: pip install "
                          "'geogateway[serve]'") from exc
    if not isinstance(config, GatewayConfig):
        config = GatewayConfig.load(config)
    reader = StatusReader(config, checkpoint_store=checkpoint_store,
                          consumer_group=consumer_group, probe_deadline=probe_deadline,
                          max_age=max_age)

    async def healthz(request: Request) -> Response:
        return PlainTextResponse("ok\n")

    async def readyz(request: Request) -> Response:
        status = await reader.status()
        body: dict[str, Any] = {"ready": status.ready, "not_ready": status.not_ready,
                                "unusable": status.unusable}
        return JSONResponse(body, status_code=200 if status.ready else 503)

    async def metrics(request: Request) -> Response:
        data, content_type = metrics_exposition(registry)
        return Response(data, headers={"Content-Type": content_type})

    async def status(request: Request) -> Response:
        current = await reader.status()
        if request.url.path.endswith(".html") or wants_html(request.headers.get("accept", "")):
            return HTMLResponse(status_page(current))
        return JSONResponse(current.to_json())

    app = Starlette(routes=[
        Route("/healthz", healthz, methods=["GET", "HEAD"]),
        Route("/readyz", readyz, methods=["GET", "HEAD"]),
        Route("/metrics", metrics, methods=["GET", "HEAD"]),
        Route("/status", status, methods=["GET", "HEAD"]),
        Route("/status.html", status, methods=["GET", "HEAD"]),
    ])
    app.state.status_reader = reader
    return app
