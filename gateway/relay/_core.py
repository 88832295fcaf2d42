"""The relay client's core: endpoints, roles, tokens, and what each attempt's outcome means
for the request. The driver (``_client.py``) does the I/O; this module decides.

The service listens on the same hybrid connection in two namespaces. The client
picks one at random as its primary, sends there, and on an error that means the
namespace is unavailable sends to the other and swaps roles (the Service Bus
outage guidance for relay endpoints). What counts as such an error is decided in
``_policy.py``.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import httpx
from tenacity import retry_if_exception_type, stop_after_attempt, stop_after_delay

from gateway.geo import GatewayHooks, emit
from gateway.relay._policy import (
    AnswerTimer,
    RelayClientPolicy,
    TokenCache,
    Verdict,
    classify_error,
    classify_response,
    is_idempotent,
    round_wait,
)
from gateway.relay.protocol import RelayEndpoint
from gateway.stores import RoleStore
from replication import (
    ANY_NAMESPACE,
    ConfigError,
    MessageRejected,
    NamespaceUnavailable,
    OperationTimeout,
    RoleState,
)

__all__ = ["AUTH_HEADER", "BaseGeoRelayClient", "Call", "Retry"]

logger = logging.getLogger("geogateway.relay")

#: The header that carries the SAS token to the relay (the Service Bus name).
AUTH_HEADER = "ServiceBusAuthorization"


class Retry(NamespaceUnavailable):
    """One attempt failed in a way that allows the next (internal: never escapes)."""


@dataclass(frozen=True)
class Failure:
    """One attempt that did not give the answer: where, what it means, and why."""

    namespace: str
    verdict: Verdict
    reason: str
    status: int | None = None  # the relay's own status, when it answered


@dataclass
class Call:
    """One request across its attempts: what to send, where, and what went wrong.

    ``slow``: the namespaces that did not answer within their deadline (suspected to
    hang); ``failures``: the attempts that ended without the answer.
    """

    method: str
    target: str
    idempotent: bool
    order: tuple[str, str]
    content: bytes | str | None = None
    json: Any = None
    params: Any = None
    headers: Mapping[str, str] | None = None
    attempts: int = 0
    failures: list[Failure] = field(default_factory=list)
    slow: set[str] = field(default_factory=set)

    def next_namespace(self) -> str:
        namespace = self.order[self.attempts % 2]
        self.attempts += 1
        return namespace


class BaseGeoRelayClient:
    """The shared core: endpoints, roles, tokens, deadlines, and the verdict on each attempt."""

    def __init__(
        self,
        primary: RelayEndpoint,
        secondary: RelayEndpoint,
        *,
        policy: RelayClientPolicy | None = None,
        hooks: Sequence[GatewayHooks] = (),
        randomize: bool = True,
        rng: random.Random | None = None,
        state_dir: str | Path | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        for name, ep in (("primary", primary), ("secondary", secondary)):
            if not isinstance(ep, RelayEndpoint):
                raise ConfigError(f"relay client: {name} must be a RelayEndpoint, e.g. "
                                  "RelayEndpoint.from_connection_string(...)")
        if primary.namespace.lower() == secondary.namespace.lower():
            raise ConfigError(f"relay client: primary and secondary are both in namespace "
                              f"{primary.namespace!r}; give hybrid connections in two namespaces")
        self.policy = policy or RelayClientPolicy()
        if randomize and (rng or random.Random()).random() < 0.5:
            primary, secondary = secondary, primary
        self._endpoints = {primary.namespace: primary, secondary.namespace: secondary}
        self._hooks = tuple(hooks)
        self._clock = clock
        self._store: RoleStore | None = None
        if state_dir is not None:
            self._store = RoleStore(Path(state_dir) / _roles_file(primary, secondary))
            self._roles = self._store.load(primary.namespace, secondary.namespace)
        else:
            self._roles = RoleState.initial(primary.namespace, secondary.namespace)
        self._tokens = {ns: TokenCache(ttl=self.policy.token_ttl,
                                       renew_before=self.policy.token_renew_before)
                        for ns in self._endpoints}
        self._timers = {ns: AnswerTimer() for ns in self._endpoints}
        self._timeout = self.policy.timeout.as_dict()
        retry = self.policy.retry
        self._retry_args: dict[str, Any] = {
            # The first attempt is the driver's; tenacity makes the rest of the rounds.
            "stop": stop_after_attempt(2 * retry.attempts - 1) | stop_after_delay(retry.max_delay),
            "wait": round_wait(retry),
            "retry": retry_if_exception_type(Retry),
            "reraise": True,
        }

    def __repr__(self) -> str:
        active, standby = (self._endpoints[ns] for ns in self._roles.order)
        return (f"{type(self).__name__}(active={active.namespace}/{active.path}, "
                f"standby={standby.namespace}/{standby.path})")

    @property
    def roles(self) -> RoleState:
        """Which namespace takes requests now (``roles.active``) and which is standby."""
        return self._roles

    @property
    def active(self) -> RelayEndpoint:
        """The endpoint requests go to first."""
        return self._endpoints[self._roles.active]

    def _begin(self, method: str, path: str, *, content: bytes | str | None, json: Any,
               params: Any, headers: Mapping[str, str] | None,
               idempotent: bool | None) -> Call:
        if not isinstance(method, str) or not method.isalpha():
            raise ValueError(f"relay request: bad HTTP method {method!r}")
        if content is not None and not isinstance(content, (bytes, str)):
            # A stream cannot be sent a second time to the other namespace.
            raise TypeError("relay request: content must be bytes or str (read a stream "
                            "into memory first: a failover sends it again)")
        return Call(method=method.upper(), target=path, idempotent=is_idempotent(
            method, idempotent), order=self._roles.order, content=content, json=json,
            params=params, headers=headers)

    def _build(self, call: Call, namespace: str) -> httpx.Request:
        endpoint = self._endpoints[namespace]
        token = self._tokens[namespace].get(
            self._clock(), lambda now: endpoint.token(ttl=self.policy.token_ttl, now=now))
        headers: httpx.Headers | dict[str, str]
        if call.headers:
            headers = httpx.Headers(call.headers)
            headers[AUTH_HEADER] = token  # replaces one the caller gave, in any case
        else:
            headers = {AUTH_HEADER: token}
        return httpx.Request(call.method, endpoint.http_url(call.target), params=call.params,
                             headers=headers, content=call.content, json=call.json,
                             extensions={"timeout": self._timeout})

    def _probe_request(self, namespace: str) -> httpx.Request:
        """A request the relay answers itself, whatever it answers: the namespace's root.

        It carries no token and names no hybrid connection, so no listener sees it.
        """
        endpoint = self._endpoints[namespace]
        root = endpoint.http_url().rsplit("/", 1)[0] + "/"
        wait = self.policy.probe_timeout
        return httpx.Request("GET", root, extensions={"timeout": {
            "connect": wait, "read": wait, "write": wait, "pool": wait}})

    def _deadline(self, namespace: str) -> float:
        return self._timers[namespace].deadline(self.policy.answer_deadline,
                                                self.policy.read_timeout)

    def _observe(self, namespace: str, seconds: float) -> None:
        self._timers[namespace].observe(seconds)

    def _settle(self, call: Call, namespace: str,
                outcome: httpx.Response | Exception) -> httpx.Response:
        """The response to return, or the error of this attempt (``Retry`` to go on)."""
        status = None
        if isinstance(outcome, httpx.Response):
            verdict = classify_response(outcome.status_code, via="via" in outcome.headers)
            if verdict is Verdict.ANSWERED:  # most requests: nothing more to build
                self._answered(call, namespace)
                self._report(call, namespace, outcome.status_code, verdict)
                return outcome
            status = outcome.status_code
            reason = f"{status} {outcome.reason_phrase} from the relay"
            if status == 404:
                reason += f" (no hybrid connection {self._endpoints[namespace].path!r} there)"
        else:
            verdict = classify_error(outcome)
            if verdict is Verdict.RAISE:
                self._report(call, namespace, None, verdict)
                raise outcome
            reason = f"{type(outcome).__name__}: {outcome}".rstrip(": ")
        self._report(call, namespace, status, verdict)
        call.failures.append(Failure(namespace, verdict, reason, status))
        logger.info("relay %s %s: %s via %s", call.method, verdict.value, reason, namespace)
        if verdict is Verdict.REJECTED:
            raise MessageRejected(
                f"relay namespace {namespace} refused the request ({reason}): check the "
                "shared access key name and key, and that the policy has the Send right")
        if verdict is Verdict.UNKNOWN and not call.idempotent:
            raise OperationTimeout(
                f"relay {call.method} to {namespace}: outcome unknown ({reason}); not sent "
                "again because the method is not idempotent (pass idempotent=True if "
                "it is)", namespace=namespace)
        raise Retry(reason, namespace=namespace)

    def _report(self, call: Call, namespace: str, status: int | None, verdict: Verdict) -> None:
        if self._hooks:
            outcome = "error" if verdict is Verdict.RAISE else verdict.value
            emit(self._hooks, "on_relay_request", namespace=namespace, method=call.method,
                 status=status, outcome=outcome)

    def _answered(self, call: Call, namespace: str) -> None:
        # Swap roles only when this request saw the active namespace fail (or not answer
        # in time): a slow request that the old primary answers must not swap them back.
        active = self._roles.active
        if namespace == active or not (active in call.slow or any(
                f.namespace == active for f in call.failures)):
            return
        self._swap(f"relay failover: {active} -> {namespace}")

    def _hung(self, call: Call, namespace: str, waited: float) -> OperationTimeout:
        """The error of a non-idempotent request whose namespace answers neither it nor
        the probe; the roles swap, so that the next requests go to the other."""
        call.failures.append(Failure(namespace, Verdict.UNKNOWN, "no answer"))
        self._report(call, namespace, None, Verdict.UNKNOWN)
        if namespace == self._roles.active:
            self._swap(f"relay failover: {namespace} does not answer (it hangs) -> "
                       f"{self._roles.standby}")
        return OperationTimeout(
            f"relay {call.method} to {namespace}: no answer in {waited:.2f} s, nor to a "
            "probe: the namespace hangs; outcome unknown, not sent again because the "
            "method is not idempotent (pass idempotent=True if it is)", namespace=namespace)

    def _swap(self, message: str) -> None:
        before, self._roles = self._roles, self._roles.swap(self._clock())
        if self._store is not None:
            try:
                self._store.save(self._roles)
            except OSError:
                logger.exception("relay roles could not be saved to %s", self._store.path)
        logger.warning("%s", message)
        emit(self._hooks, "on_failover", from_namespace=before.active,
             to_namespace=self._roles.active, at=self._roles.changed_at)

    def _give_up(self, call: Call, last: Exception) -> NoReturn:
        if not isinstance(last, Retry):
            raise last
        tried = "; ".join(f"{f.namespace}: {f.reason}" for f in call.failures)
        if any(f.verdict is Verdict.UNKNOWN for f in call.failures):
            raise OperationTimeout(f"relay {call.method}: no answer, outcome unknown after "
                                   f"{call.attempts} attempts ({tried})",
                                   namespace=ANY_NAMESPACE) from None
        if call.failures and all(f.status == 404 for f in call.failures):
            paths = sorted({self._endpoints[f.namespace].path for f in call.failures})
            where = " and ".join(sorted({f.namespace for f in call.failures}))
            raise MessageRejected(
                f"relay {call.method}: hybrid connection {' / '.join(map(repr, paths))} does "
                f"not exist in {where} (404 from the relay): check its name (-c / "
                "EntityPath), or create it") from None
        raise NamespaceUnavailable(f"relay {call.method}: both namespaces are unavailable "
                                   f"({tried})", namespace=ANY_NAMESPACE) from None


def _roles_file(*endpoints: RelayEndpoint) -> str:
    # The same file whichever of the two the random pick made primary.
    names = sorted(f"{ep.namespace}-{ep.path}" for ep in endpoints)
    safe = ["".join(c if c.isalnum() or c in ".-" else "_" for c in n) for n in names]
    return f"relay-roles-{safe[0]}-{safe[1]}.json"
