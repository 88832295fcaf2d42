"""The relay drills: HTTP requests through a geo-redundant hybrid connection while a
namespace fails.

``relay-outage``, ``relay-flapping`` and ``relay-hang`` (``geogateway drill --scenario
relay-...``). The
drill starts the relay emulator (:class:`gateway.relay.RelayEmulator`) with two
namespaces, ``primary`` and ``secondary``, serving one hybrid connection, and a
:class:`gateway.relay.GeoRelayListener` on both; all of them run in the drill's own
process and event loop, so they end with it however it ends. It sends ``requests``
HTTP requests one after the other through an :class:`~gateway.relay.AsyncGeoRelayClient`
(primary first), cycling GET, PUT and POST, while it takes the primary down through
the same control file that ``geogateway namespace down primary`` writes:

* ``relay-outage``: the primary is down from 30% of the requests to 60%;
* ``relay-flapping``: the primary goes down at 20%, 40% and 60%, up again 10% later;
* ``relay-hang``: at 10%, 25%, 40%, 55%, 70% and 85% of the requests, the namespace
  the client is using hangs (accepts connections and answers nothing, the control
  file's ``hang``) and the other one answers again; each hang begins just before a
  GET, whose time to its answer is the *first answer after the hang*.

A *failover* is an outage of the namespace the client was sending to, while the other
is up, after which a request was answered through the other; its time runs from the
moment the outage is in effect to that answer, so ``failovers ==
len(failover_seconds)``. An outage of the namespace the client has already left (the
flapping primary after the first failover) is not one. ``role_swaps`` counts the
client's ``on_failover`` hook calls.

The drill passes when every idempotent request (GET, PUT) got an answer from the
listener; a POST whose outcome is unknown is not sent twice, and is counted as failed.
``relay-hang`` also needs the first answer after each hang within
:data:`FIRST_ANSWER_TARGET` (1 s) at p99 (the largest of a few).
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gateway.drill._common import (
    PRIMARY,
    SECONDARY,
    Progress,
    RelayScenario,
    new_state_dir,
    remove_state_dir,
)
from gateway.geo import GatewayHooks
from gateway.relay import RelayRequest, RelayResponse
from gateway.transports import ControlFile, namespace_files
from replication import ConfigError, GatewayError

if TYPE_CHECKING:
    import httpx

    from gateway.emulator import RelayEmulator
    from gateway.relay import AsyncGeoRelayClient

__all__ = ["FIRST_ANSWER_TARGET", "RelayDrillReport", "run_relay_drill"]

logger = logging.getLogger("geogateway.drill")

HYBRID_CONNECTION = "drill"
METHODS = ("GET", "PUT", "POST")
IDEMPOTENT = frozenset({"GET", "PUT"})
# The relay emulator applies a control file change within its 0.1 s poll: wait that out
# (with a margin), then time the failover from then.
_APPLIES = 0.25
_CONNECT_TIMEOUT = 15.0
# How long a listener has to answer (the service's 60 s would only slow a failing drill).
_ANSWER_TIMEOUT = 10.0
#: relay-hang: the first answer after a hang must come within this (seconds, p99).
FIRST_ANSWER_TARGET = 1.0
# relay-hang: fewer requests than this leave too few GETs for six hangs apart.
_HANG_MIN_REQUESTS = 20

_SCRIPTS: dict[RelayScenario, list[tuple[float, str]]] = {
    RelayScenario.RELAY_OUTAGE: [(0.3, "down"), (0.6, "up")],
    RelayScenario.RELAY_FLAPPING: [(0.2, "down"), (0.3, "up"), (0.4, "down"), (0.5, "up"),
                                   (0.6, "down"), (0.7, "up")],
    RelayScenario.RELAY_HANG: [(f, "hang") for f in (0.1, 0.25, 0.4, 0.55, 0.7, 0.85)],
}


@dataclass(frozen=True, kw_only=True)
class RelayDrillReport:
    """The outcome of one relay drill; ``passed`` when no idempotent request failed (and,
    for ``relay-hang``, the first answer after each hang came within 1 s at p99).

    ``answered_by`` counts the answers per namespace; ``failed_idempotent`` the GET
    and PUT requests without an answer; ``first_answer_seconds`` the time of the first
    request after each hang (``relay-hang``). See the module docstring for failovers.
    """

    scenario: str
    requests: int
    sent: int
    answered: int
    failed: int
    failed_idempotent: int
    answered_by: dict[str, int] = field(default_factory=dict)
    failover_seconds: list[float] = field(default_factory=list)
    role_swaps: int = 0
    first_answer_seconds: list[float] = field(default_factory=list)
    elapsed_seconds: float = 0.0
    state_dir: str | None = None

    @property
    def passed(self) -> bool:
        within = (self.scenario != RelayScenario.RELAY_HANG.value
                  or (self.first_answer_p99 is not None
                      and self.first_answer_p99 <= FIRST_ANSWER_TARGET))
        return (self.failed_idempotent == 0 and self.answered + self.failed == self.sent
                and within)

    @property
    def first_answer_p99(self) -> float | None:
        """The 99th percentile of ``first_answer_seconds`` (nearest rank), or None."""
        times = sorted(self.first_answer_seconds)
        if not times:
            return None
        return times[max(0, math.ceil(0.99 * len(times)) - 1)]

    @property
    def failovers(self) -> int:
        return len(self.failover_seconds)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["passed"] = self.passed
        data["failovers"] = self.failovers
        data["failover_max_seconds"] = max(self.failover_seconds, default=None)
        data["first_answer_p99_seconds"] = self.first_answer_p99
        return data


async def run_relay_drill(
    *,
    scenario: RelayScenario | str = RelayScenario.RELAY_OUTAGE,
    requests: int = 300,
    data_dir: str | Path | None = None,
    keep_state: bool = False,
    on_state_dir: Callable[[Path], None] | None = None,
    progress: Progress | None = None,
) -> RelayDrillReport:
    """Run one relay drill and return its report (see the module docstring).

    Args:
        scenario: ``relay-outage``, ``relay-flapping`` or ``relay-hang``.
        requests: how many requests to send.
        data_dir: where the run's state folder is made (a new one each run, holding
            the namespaces' control files and the client's roles); the system's
            temporary directory when not given. Removed when the drill passes.
        keep_state: keep the state folder even when the drill passes.
        on_state_dir: called with the state folder once it exists.
        progress: called as ``progress(phase, done, total)``.

    Raises:
        ConfigError: an unknown scenario, fewer than 1 request (20 for ``relay-hang``),
            or a port in use.
        NamespaceUnavailable: the listener could not connect to the emulator.
    """
    scenario = RelayScenario.parse(scenario)
    if not isinstance(requests, int) or requests < 1:
        raise ConfigError(f"a relay drill sends at least 1 request, not {requests!r}")
    if scenario is RelayScenario.RELAY_HANG and requests < _HANG_MIN_REQUESTS:
        raise ConfigError(f"relay-hang sends at least {_HANG_MIN_REQUESTS} requests (six "
                          f"hangs, each before a GET of its own), not {requests}: give "
                          "more --requests")
    root = new_state_dir(data_dir)
    if on_state_dir is not None:
        on_state_dir(root)
    report = await _RelayDrill(scenario, requests, root, progress).run()
    if report.passed and not keep_state and remove_state_dir(root):
        return report
    return replace(report, state_dir=str(root))


class _Swaps(GatewayHooks):
    def __init__(self) -> None:
        self.count = 0

    def on_failover(self, *, from_namespace: str, to_namespace: str, at: float) -> None:
        self.count += 1


class _Service:
    """The drill's service behind the listener: items kept in memory, shared by both
    namespaces' channels (one service listening in two namespaces)."""

    def __init__(self) -> None:
        self.items: dict[str, bytes] = {}

    async def handle(self, request: RelayRequest) -> RelayResponse:
        key = request.target.split("?", 1)[0]
        if request.method == "PUT":
            self.items[key] = request.body
            return RelayResponse(status=200, body=request.body)
        if request.method == "POST":
            return RelayResponse(status=201, body=request.body)
        if key in self.items:
            return RelayResponse(status=200, body=self.items[key])
        return RelayResponse(status=404, body=b"no such item")


class _RelayDrill:
    def __init__(self, scenario: RelayScenario, total: int, root: Path,
                 progress: Progress | None) -> None:
        self.scenario, self.total, self.root = scenario, total, root
        self.progress = progress or (lambda phase, done, total: None)
        self.controls = {ns: ControlFile(namespace_files(ns, root / "namespaces")[1])
                         for ns in (PRIMARY, SECONDARY)}
        for control in self.controls.values():
            control.update(down=False, latency=0.0, lost_replies=0.0, hang=False)
        self.swaps = _Swaps()
        self.answered_by: Counter[str] = Counter()
        self.sent = self.failed = self.failed_idempotent = 0
        self.failover_seconds: list[float] = []
        self.first_answer_seconds: list[float] = []
        self._after_hang = False  # the next request is the first after a hang
        self._fault: tuple[str, float] | None = None  # (namespace, in effect since)
        self._down: set[str] = set()
        self._hosts: dict[str, str] = {}  # "host:port" -> namespace name

    async def run(self) -> RelayDrillReport:
        from gateway.emulator import RelayEmulator
        from gateway.relay import AsyncGeoRelayClient, GeoRelayListener

        started = time.monotonic()
        emulator = RelayEmulator({PRIMARY: 0, SECONDARY: 0}, [HYBRID_CONNECTION],
                                 data_dir=self.root / "namespaces",
                                 answer_timeout=_ANSWER_TIMEOUT)
        async with contextlib.AsyncExitStack() as stack:
            await stack.enter_async_context(emulator)
            endpoints = [emulator.endpoint(ns, HYBRID_CONNECTION) for ns in (PRIMARY, SECONDARY)]
            self._hosts = {emulator.endpoint(ns, HYBRID_CONNECTION).namespace: ns
                           for ns in (PRIMARY, SECONDARY)}
            listener = await stack.enter_async_context(GeoRelayListener(
                endpoints, _Service().handle, on_error=_log_listener_error))
            await listener.wait_connected(_CONNECT_TIMEOUT)
            client = await stack.enter_async_context(AsyncGeoRelayClient(
                endpoints[0], endpoints[1], randomize=False, hooks=[self.swaps],
                state_dir=self.root / "state"))
            try:
                await self._send_all(client, emulator)
            finally:
                for control in self.controls.values():
                    control.update(down=False, hang=False)
        return RelayDrillReport(
            scenario=self.scenario.value, requests=self.total, sent=self.sent,
            answered=sum(self.answered_by.values()), failed=self.failed,
            failed_idempotent=self.failed_idempotent, answered_by=dict(self.answered_by),
            failover_seconds=self.failover_seconds, role_swaps=self.swaps.count,
            first_answer_seconds=self.first_answer_seconds,
            elapsed_seconds=round(time.monotonic() - started, 3),
        )

    async def _send_all(self, client: AsyncGeoRelayClient, emulator: RelayEmulator) -> None:
        import asyncio

        script = list(_SCRIPTS[self.scenario])
        for i in range(self.total):
            injected = False
            while script and i >= script[0][0] * self.total and (
                    script[0][1] != "hang" or METHODS[i % len(METHODS)] == "GET"):
                self._inject(script.pop(0)[1], client)
                injected = True
            if injected:
                await asyncio.sleep(_APPLIES)
                if self._fault is not None:
                    self._fault = (self._fault[0], time.monotonic())
            await self._request(client, i)
            if (i + 1) % 50 == 0 or i + 1 == self.total:
                self.progress("requests", i + 1, self.total)

    def _inject(self, action: str, client: AsyncGeoRelayClient) -> None:
        if action == "hang":
            self._hang(client)
            return
        self.controls[PRIMARY].update(down=action == "down")
        if action == "up":
            self._down.discard(PRIMARY)
            return
        self._down.add(PRIMARY)
        active = self._hosts.get(client.roles.active)
        # A failover clock starts only when the client's namespace fails and the other is up.
        if self._fault is None and active == PRIMARY and SECONDARY not in self._down:
            self._fault = (PRIMARY, time.monotonic())

    def _hang(self, client: AsyncGeoRelayClient) -> None:
        # The namespace the client uses hangs, the other answers again: every hang is
        # one the client must get out of.
        active = self._hosts.get(client.roles.active, PRIMARY)
        for namespace, control in self.controls.items():
            control.update(hang=namespace == active)
        self._fault = (active, time.monotonic())
        self._after_hang = True

    async def _request(self, client: AsyncGeoRelayClient, i: int) -> None:
        method = METHODS[i % len(METHODS)]
        target = f"/items/{i // len(METHODS)}"
        body = f"drill request {i}".encode() if method != "GET" else None
        self.sent += 1
        first_after_hang, self._after_hang = self._after_hang, False
        started = time.monotonic()
        try:
            response = await client.request(method, target, content=body)
        except GatewayError as exc:
            self.failed += 1
            self.failed_idempotent += method in IDEMPOTENT
            logger.warning("relay drill: %s %s failed: %s", method, target, exc)
            return
        namespace = self._answered_by(response)
        if response.status_code >= 500 or namespace is None:
            self.failed += 1
            self.failed_idempotent += method in IDEMPOTENT
            logger.warning("relay drill: %s %s: %s from %s", method, target,
                           response.status_code, namespace)
            return
        self.answered_by[namespace] += 1
        if first_after_hang:
            self.first_answer_seconds.append(round(time.monotonic() - started, 4))
        if self._fault is not None and namespace != self._fault[0]:
            self.failover_seconds.append(round(time.monotonic() - self._fault[1], 4))
            self._fault = None

    def _answered_by(self, response: httpx.Response) -> str | None:
        return self._hosts.get(response.request.url.netloc.decode("ascii"))


def _log_listener_error(error: BaseException) -> None:
    # Lost control channels are the drill's point: logged, never silent.
    logger.info("relay drill listener: %s: %s", type(error).__name__, error)
