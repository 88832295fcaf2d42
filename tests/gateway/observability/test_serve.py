"""``geogateway serve``: the real server (uvicorn, a child process on 127.0.0.1) asked
with a real HTTP client (httpx) while namespaces are taken down with
``geogateway namespace down``, hang, and the durable queue fills or is damaged.

The server runs with ``--max-age 0``: every request probes afresh, so each answer
reflects what was done just before it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import httpx
import pytest

from gateway import GeoSender
from tests.gateway.cli.cli_support import expect_one_line_error, run_process
from tests.gateway.observability.serving import (
    ENTITY,
    Served,
    make_gateway,
    serve_process,
    uvicorn_thread,
)

pytestmark = pytest.mark.usefixtures("dirs")

SECRET = "S3cretKeyNeverShown"


@pytest.fixture
def served(dirs: dict[str, Path]):
    config = make_gateway(dirs)
    with serve_process("--config", str(config), "--max-age", "0", "--probe-deadline", "0.5",
                       cwd=dirs["tmp"]) as server:
        yield server


def namespace(tmp: Path, *args: str) -> None:
    code, _, err = run_process("namespace", *args, cwd=tmp)
    assert code == 0, err


def status_of(server: Served) -> dict:
    response = httpx.get(f"{server.url}/status")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    return response.json()


def states(data: dict) -> dict[str, tuple[str, str]]:
    return {n["name"]: (n["role"], n["state"]) for n in data["namespaces"]}


def test_every_endpoint_answers_for_a_healthy_gateway(served: Served) -> None:
    # Given both namespaces up / When each endpoint is asked
    health = httpx.get(f"{served.url}/healthz")
    ready = httpx.get(f"{served.url}/readyz")
    metrics = httpx.get(f"{served.url}/metrics")
    data = status_of(served)
    page = httpx.get(f"{served.url}/status", headers={"Accept": "text/html,*/*;q=0.8"})
    page_by_name = httpx.get(f"{served.url}/status.html")
    # Then it is alive and ready, and says why
    assert (health.status_code, health.text) == (200, "ok\n")
    assert ready.status_code == 200
    assert ready.json() == {"ready": True, "not_ready": [], "unusable": []}
    assert metrics.status_code == 200
    assert metrics.headers["content-type"].startswith("text/plain; version=")
    assert "python_info" in metrics.text  # the global registry's default collectors
    assert data["ready"] is True and data["entity"] == ENTITY and data["mode"] == "passive"
    assert states(data) == {"primary": ("active", "up"), "secondary": ("standby", "up")}
    assert all(n["probe_seconds"] is not None for n in data["namespaces"])
    assert data["durable_queue"]["writable"] is True and data["durable_queue"]["waiting"] == 0
    for html in (page, page_by_name):
        assert html.status_code == 200 and html.headers["content-type"].startswith("text/html")
        assert "<table>" in html.text and "ready" in html.text and "secondary" in html.text


def test_readyz_turns_503_only_when_both_namespaces_are_down(
        served: Served, dirs: dict[str, Path]) -> None:
    # When the primary is taken down: still ready, on the secondary
    namespace(dirs["tmp"], "down", "primary")
    assert httpx.get(f"{served.url}/readyz").status_code == 200
    assert states(status_of(served))["primary"] == ("active", "down")
    # When the secondary goes down too: not ready, saying both are down
    namespace(dirs["tmp"], "down", "secondary")
    ready = httpx.get(f"{served.url}/readyz")
    assert ready.status_code == 503
    (reason,) = ready.json()["not_ready"]
    assert "no namespace is usable" in reason
    assert "primary down" in reason and "secondary down" in reason
    assert "namespace up primary" in reason  # what to do
    # When the primary comes back: ready again
    namespace(dirs["tmp"], "up", "primary")
    assert httpx.get(f"{served.url}/readyz").status_code == 200
    assert states(status_of(served)) == {"primary": ("active", "up"),
                                         "secondary": ("standby", "down")}


def test_hung_namespaces_are_not_usable_once_the_probe_deadline_passes(
        served: Served, dirs: dict[str, Path]) -> None:
    namespace(dirs["tmp"], "faults", "primary", "--hang")
    assert httpx.get(f"{served.url}/readyz").status_code == 200
    namespace(dirs["tmp"], "faults", "secondary", "--hang")
    ready = httpx.get(f"{served.url}/readyz", timeout=10)
    assert ready.status_code == 503
    assert "no answer within 0.5 s" in ready.json()["not_ready"][0]
    data = status_of(served)
    assert {n["state"] for n in data["namespaces"]} == {"no answer"}
    namespace(dirs["tmp"], "up", "secondary")
    assert httpx.get(f"{served.url}/readyz", timeout=10).status_code == 200


def test_the_backlog_and_its_oldest_age_while_both_are_down(
        served: Served, dirs: dict[str, Path]) -> None:
    # Given both namespaces down and a sender that buffers three messages
    namespace(dirs["tmp"], "down", "primary")
    namespace(dirs["tmp"], "down", "secondary")
    queue = dirs["tmp"] / "buffer.db"
    with GeoSender(primary="local://primary", secondary="local://secondary", entity=ENTITY,
                   durable_queue=queue, data_dir=dirs["data"], state_dir=dirs["state"]) as sender:
        for i in range(3):
            assert sender.send(f"m{i}".encode()).buffered == (f"*/{ENTITY}",)
    before = hashlib.sha256(queue.read_bytes()).hexdigest()
    # When the status is asked twice
    first = status_of(served)["durable_queue"]
    second = status_of(served)["durable_queue"]
    # Then it shows the backlog per destination and how long the oldest has waited,
    # which only grows; the queue file is read, never written
    assert first["waiting"] == 3 and first["writable"] is True
    (dest,) = first["destinations"]
    assert dest["destination"] == f"*/{ENTITY}" and dest["waiting"] == 3
    assert "primary.db" in dest["buffered_for"]  # whose messages they are
    assert 0 <= first["oldest_age_seconds"] <= second["oldest_age_seconds"]
    assert httpx.get(f"{served.url}/readyz").status_code == 503  # both down
    assert hashlib.sha256(queue.read_bytes()).hexdigest() == before
    # When they come back and the queue is replayed, the backlog is gone
    namespace(dirs["tmp"], "up", "primary")
    namespace(dirs["tmp"], "up", "secondary")
    code, _, err = run_process("queue", "replay", "-q", str(queue), "--data-dir",
                               str(dirs["data"]), cwd=dirs["tmp"])
    assert code == 0, err
    data = status_of(served)
    assert data["durable_queue"]["waiting"] == 0 and data["ready"] is True


def test_a_damaged_queue_file_is_not_ready_and_stays_as_it_was(
        served: Served, dirs: dict[str, Path]) -> None:
    queue = dirs["tmp"] / "buffer.db"
    queue.write_bytes(b"this is not a queue" * 300)
    ready = httpx.get(f"{served.url}/readyz")
    assert ready.status_code == 503
    (reason,) = ready.json()["not_ready"]
    assert reason.startswith("the durable queue is not writable: queue file")
    assert "salvage" in reason
    assert queue.read_bytes() == b"this is not a queue" * 300


def test_no_key_in_any_answer(dirs: dict[str, Path]) -> None:
    # Given a primary reached by a connection string with a key (nothing listens there)
    config = make_gateway(dirs, primary=(
        f"Endpoint=sb://127.0.0.1:9/;SharedAccessKeyName=root;SharedAccessKey={SECRET};"
        "UseDevelopmentEmulator=true"))
    with serve_process("--config", str(config), "--max-age", "0", cwd=dirs["tmp"]) as server:
        answers = [httpx.get(f"{server.url}{path}", timeout=10)
                   for path in ("/healthz", "/readyz", "/metrics", "/status", "/status.html")]
        data = answers[3].json()
    # Then the primary is down, named by its host, and the key appears nowhere
    primary = data["namespaces"][0]
    assert (primary["name"], primary["state"]) == ("127.0.0.1:9", "down")
    assert answers[1].status_code == 200  # the secondary is up
    for answer in answers:
        assert SECRET not in answer.text
    code, out, err = run_process("status", "--config", str(config), "--json", cwd=dirs["tmp"])
    assert code == 0 and SECRET not in out + err
    assert json.loads(out)["namespaces"][0]["state"] == "down"


def test_the_app_mounts_in_an_applications_own_app(dirs: dict[str, Path]) -> None:
    from prometheus_client import CollectorRegistry, Counter
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Mount, Route

    from gateway.geo import GatewayConfig
    from gateway.observability import create_app

    # Given an application that mounts the status app under /ops, with its own registry
    registry = CollectorRegistry()
    Counter("geogateway_example_sends", "Sends.", registry=registry).inc(3)

    async def home(request):
        return PlainTextResponse("the application")

    app = Starlette(routes=[
        Route("/", home),
        Mount("/ops", app=create_app(GatewayConfig.load(make_gateway(dirs)), registry=registry,
                                     max_age=0)),
    ])
    # When it is served by uvicorn / Then both answer
    with uvicorn_thread(app) as url:
        assert httpx.get(f"{url}/").text == "the application"
        assert httpx.get(f"{url}/ops/readyz").status_code == 200
        metrics = httpx.get(f"{url}/ops/metrics").text
        assert "geogateway_example_sends_total 3.0" in metrics
        assert "python_info" not in metrics  # that registry only
        assert status_of(Served(url=f"{url}/ops", process=None))["ready"] is True  # type: ignore[arg-type]


def test_serve_refuses_a_port_in_use_and_a_missing_config(dirs: dict[str, Path]) -> None:
    import socket

    config = make_gateway(dirs, create=False)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = str(busy.getsockname()[1])
        result = run_process("serve", "--config", str(config), "--port", port, cwd=dirs["tmp"])
    expect_one_line_error(result, 2, f"port {port} on 127.0.0.1 is in use", "--port")
    result = run_process("serve", "--config", str(dirs["tmp"] / "nope.toml"), cwd=dirs["tmp"])
    expect_one_line_error(result, 1, "does not exist")
