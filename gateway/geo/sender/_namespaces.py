"""The sender's two namespaces: transports, roles, down marks, retried sends and probes."""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import anyio
from tenacity import (
    AsyncRetrying,
    retry_if_exception,
    stop_after_attempt,
    stop_after_delay,
    wait_random_exponential,
)

from gateway.geo._factory import NamespaceLike, open_transport
from gateway.geo._hooks import GatewayHooks, emit
from gateway.geo.sender._hedge import HedgeOutcome, batch_bytes, run_attempts
from gateway.geo.sender._roles import RoleKeeper, RolesTarget, open_role_store
from gateway.geo.sender._splitting import send_in_parts
from gateway.transports.base import Transport
from replication import (
    DeadlineEstimator,
    DeadlinePolicy,
    GatewayError,
    Message,
    Mode,
    NamespaceMisconfigured,
    Operation,
    RetryPolicy,
    RoleState,
    SendProgress,
    TransportError,
    retry_in_namespace,
)

__all__ = ["NamespacePair", "SendOutcome"]

logger = logging.getLogger("geogateway")

# How long aclose() waits for links being opened ahead of sends.
_PREPARE_WAIT = 5.0


@dataclass(frozen=True)
class SendOutcome:
    """How :meth:`NamespacePair.send_hedged` ended: the attempts' outcome, and whether
    it failed over (the roles were swapped, or the namespace that took it was not the
    one active when it began)."""

    outcome: HedgeOutcome
    failed_over: bool

    @property
    def accepted(self) -> tuple[str, ...]:
        return self.outcome.accepted


class NamespacePair:
    """The primary and secondary namespace of one sender, and what it knows of them.

    It sends a batch to one namespace with the retry policy, or to the first of
    several that takes it within its deadline, hedging to the next one when the one
    before has not answered in time (swapping the roles, persisted under
    ``state_dir``, when that one was not the active one); marks namespaces down and
    probes them back;
    opens their links ahead of sends. Which namespace to try is the caller's
    decision (``replication.plan_send``), made from ``roles`` and ``down``.
    """

    def __init__(
        self,
        primary: NamespaceLike,
        secondary: NamespaceLike,
        *,
        entity: str,
        retry: RetryPolicy,
        deadlines: DeadlinePolicy,
        hooks: Sequence[GatewayHooks],
        data_dir: str | os.PathLike[str] | None,
        state_dir: str | os.PathLike[str] | None,
        clock: Callable[[], float],
        sleep: Callable[[float], Awaitable[None]],
        roles_store: RolesTarget | None = None,
    ) -> None:
        self.entity = entity
        self._retry = retry
        #: Each namespace's send deadline, from its recent latencies.
        self.estimator = DeadlineEstimator(deadlines)
        #: Each namespace's recent answers to sends: a send queued behind others is
        #: given the time the namespace took to answer them (a busy namespace is not
        #: a hung one).
        self.progress = SendProgress()
        self._hooks = hooks
        self._clock = clock
        self._sleep = sleep
        self._owned: list[Transport] = []
        self.transports: dict[str, Transport] = {}
        for ns in (primary, secondary):
            transport, owned = open_transport(ns, data_dir=data_dir)
            if transport.namespace in self.transports:
                raise ValueError(f"primary and secondary are both {transport.namespace!r}")
            self.transports[transport.namespace] = transport
            if owned:
                self._owned.append(transport)
        names = list(self.transports)
        store, owned = open_role_store(roles_store, state_dir=state_dir, names=names)
        #: Which namespace is active: persisted, and shared with a fleet's senders.
        self.role_keeper = RoleKeeper(store, names[0], names[1], owned=owned, hooks=hooks,
                                      clock=clock)
        #: Namespaces marked down, with when: skipped until a probe succeeds.
        self.down: dict[str, float] = {}
        # Opening links ahead of sends (prepare_send); awaited, not cancelled, by aclose():
        # an SDK client cancelled halfway through opening can leave its socket open.
        self._preparing: set[asyncio.Task[None]] = set()
        # Sends past their deadline that have not ended yet (run_attempts' ``late``).
        self._late: set[asyncio.Task[None]] = set()

    # -- sending --------------------------------------------------------------------

    async def send_hedged(
        self, batch: Sequence[Message], order: Sequence[str], *, mode: Mode,
        planned: RoleState | None = None,
    ) -> SendOutcome:
        """Send ``batch`` to the namespaces of ``order`` with deadlines and hedging.

        Passive: one after the other until one takes it; the next one also when the
        one before has not answered within its deadline (a hedge, not cancelling
        it); the roles are swapped when the one that took it was not active. Active:
        all at once, each within its deadline. A namespace that failed, or had not
        answered in time, is marked down (``on_namespace_down``), after the hedge
        succeeded.

        The roles change only from ``planned``, the roles ``order`` was made from
        (``roles`` now when not given): a send that lands on the namespace that was
        active when it was planned never swaps them, whatever other sends did meanwhile
        (:meth:`RoleKeeper.fail_over_to`).

        Raises:
            Exception: a bug in a transport (anything but a ``GatewayError``).
        """
        planned = self.roles if planned is None else planned
        outcome = await run_attempts(
            order, lambda ns: self.send_to(ns, batch), mode=mode,
            estimator=self.estimator, progress=self.progress, entity=self.entity,
            size=batch_bytes(batch))
        for ns, task in outcome.late.items():
            self._keep_late(ns, task)
        for ns, error in outcome.errors.items():
            if isinstance(error, TransportError):
                self.mark_down(ns, error)
        failed_over = False
        if (mode is Mode.PASSIVE and outcome.accepted
                and outcome.accepted[0] != planned.active):
            failed_over = await self.role_keeper.fail_over_to(outcome.accepted[0],
                                                              planned=planned)
        # It went elsewhere than the namespace active when it began: a failover, even
        # when a send in flight at the same time swapped the roles first.
        if mode is Mode.PASSIVE and outcome.accepted and outcome.accepted[0] != planned.active:
            failed_over = True
        return SendOutcome(outcome, failed_over)

    async def send_within(self, namespace: str, batch: Sequence[Message]) -> None:
        """Send to one namespace (with the retry policy) within its deadline; an
        attempt past it goes on in the background.

        Raises:
            TransportError: it failed (``OperationTimeout``: no answer in time).
            MessageRejected: it refused the batch for good.
        """
        result = await self.send_hedged(batch, [namespace], mode=Mode.ACTIVE)
        if not result.accepted:
            raise result.outcome.errors[namespace]

    async def send_to(self, namespace: str, batch: Sequence[Message]) -> None:
        """Send with the retry policy; a batch the namespace refuses for size goes again
        in halves, in order, so that only a message too large on its own is refused
        (:func:`~gateway.geo.sender._splitting.send_in_parts`)."""
        await send_in_parts(functools.partial(self._send_retried, namespace), batch,
                            namespace=namespace)

    async def _send_retried(self, namespace: str, batch: Sequence[Message]) -> None:
        """Send with the retry policy: ``attempts`` tries at most, none begun after
        ``max_delay``, the second at once and a random exponential backoff before each
        later one. A refusal
        (``NamespaceRefused``) is not retried: the namespace said no, and the send goes
        on to the other one at once (``replication.retry_in_namespace``). Each
        success's latency goes to the namespace's deadline estimator."""
        transport = self.transports[namespace]
        retry = self._retry
        started = time.monotonic()
        try:
            # Most sends succeed at once: only one that failed pays for tenacity.
            await self._timed_send(transport, batch)
            return
        except TransportError as exc:
            if (retry.attempts <= 1 or not retry_in_namespace(exc)
                    or time.monotonic() - started >= retry.max_delay):
                raise
        # The first retry goes at once: a dropped connection is reopened by it, and a
        # single blip costs one round trip (no failover, no role swap). Tenacity backs
        # off before the later ones: random up to initial * 2**(n-1) before attempt n + 1.
        left = retry.max_delay - (time.monotonic() - started)
        retrying = AsyncRetrying(
            stop=stop_after_attempt(retry.attempts - 1) | stop_after_delay(max(0.0, left)),
            wait=wait_random_exponential(multiplier=2 * retry.initial_backoff,
                                         max=retry.max_backoff),
            retry=retry_if_exception(retry_in_namespace),
            reraise=True,
            sleep=self._sleep,
        )
        await retrying(self._timed_send, transport, batch)

    async def _timed_send(self, transport: Transport, batch: Sequence[Message]) -> None:
        estimator = self.estimator
        began = estimator.clock()
        await transport.send(self.entity, batch)
        estimator.observe(transport.namespace, Operation.SEND, estimator.clock() - began,
                          size=batch_bytes(batch))

    def _keep_late(self, namespace: str, task: asyncio.Task[None]) -> None:
        # An attempt past its deadline goes on; say how it ended, and let aclose()
        # cancel it if it is still hanging then.
        over = time.monotonic()
        self._late.add(task)

        def ended(task: asyncio.Task[None]) -> None:
            self._late.discard(task)
            after = time.monotonic() - over
            if task.cancelled():
                return
            error = task.exception()
            if error is None:
                logger.info("a send to %s still running when its send was over landed "
                            "%.3f s later (a second copy, if any, is removed by the "
                            "receivers)", namespace, after)
            else:
                logger.info("a send to %s still running when its send was over failed "
                            "%.3f s later: %s", namespace, after, error)

        task.add_done_callback(ended)

    # -- health and roles -----------------------------------------------------------

    def mark_down(self, namespace: str, error: BaseException) -> None:
        """Skip ``namespace`` until a probe finds it healthy (``on_namespace_down``)."""
        if namespace not in self.down:
            self.down[namespace] = self._clock()
            if isinstance(error, NamespaceMisconfigured):
                # Not an outage that passes: someone must fix the configuration. Said
                # once, when it is marked down (a probe that fails keeps it down).
                logger.error("namespace %s is unusable as configured (sends go to the "
                             "other namespace or are buffered): %s", namespace, error)
            else:
                logger.warning("namespace %s is down: %s", namespace, error)
            emit(self._hooks, "on_namespace_down", namespace=namespace, error=error)

    @property
    def roles(self) -> RoleState:
        """Which namespace is active now (``role_keeper`` changes and persists it)."""
        return self.role_keeper.state

    async def fail_back(self) -> None:
        """Make the primary active again (``on_failover``)."""
        await self.role_keeper.fail_back()

    async def probe_down(self) -> None:
        """Probe the namespaces marked down, at once and each within the deadline
        policy's ``initial`` (a hung namespace stays down); mark up
        (``on_namespace_up``) and reopen the links of those that answer."""
        await asyncio.gather(*(self._probe(ns) for ns in list(self.down)))

    async def _probe(self, ns: str) -> None:
        with anyio.move_on_after(self.estimator.policy.initial):
            try:
                await self.transports[ns].probe()
            except TransportError:
                return
            if self.down.pop(ns, None) is None:
                return  # marked up meanwhile
            logger.warning("namespace %s is back", ns)
            emit(self._hooks, "on_namespace_up", namespace=ns)
            self.prepare_soon(ns)

    # -- links ----------------------------------------------------------------------

    def prepare_soon(self, *namespaces: str) -> None:
        """Open the links of ``namespaces`` in the background, ahead of sends."""
        task = asyncio.get_running_loop().create_task(self._prepare(*namespaces))
        self._preparing.add(task)
        task.add_done_callback(self._preparing.discard)

    async def _prepare(self, *namespaces: str) -> None:
        # Best effort: a namespace that cannot be prepared now is found out by a send.
        async def one(ns: str) -> None:
            try:
                await self.transports[ns].prepare_send(self.entity)
            except NamespaceMisconfigured as exc:
                self.mark_down(ns, exc)  # no send would get through: skip it now
            except GatewayError as exc:
                logger.info("could not open %s ahead of a send: %s", ns, exc)

        await asyncio.gather(*(one(ns) for ns in namespaces if ns not in self.down))

    async def aclose(self) -> None:
        """Cancel the sends still running past their deadline (their outcome was
        unknown already), wait (bounded) for links being opened, then close the
        transports opened here."""
        hanging = list(self._late)
        for task in hanging:
            task.cancel()
        if hanging:
            await asyncio.gather(*hanging, return_exceptions=True)
        if self._preparing:
            _, late = await asyncio.wait(self._preparing, timeout=_PREPARE_WAIT)
            for task in late:
                task.cancel()
        for transport in self._owned:
            await transport.aclose()
        await self.role_keeper.flush()
        self.role_keeper.close()
