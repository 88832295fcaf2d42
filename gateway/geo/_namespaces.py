"""The sender's two namespaces: transports, roles, down marks, retried sends and probes."""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from tenacity import (
    AsyncRetrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_after_delay,
    wait_random_exponential,
)

from gateway.geo._factory import NamespaceLike, default_state_dir, open_transport
from gateway.geo._hooks import GatewayHooks, emit
from gateway.geo._splitting import send_in_parts
from gateway.stores import RoleStore
from gateway.transports.base import Transport
from replication import GatewayError, Message, RetryPolicy, RoleState, TransportError

__all__ = ["NamespacePair"]

logger = logging.getLogger("geogateway")

# How long aclose() waits for links being opened ahead of sends.
_PREPARE_WAIT = 5.0


class NamespacePair:
    """The primary and secondary namespace of one sender, and what it knows of them.

    It sends a batch to one namespace with the retry policy, or to the first of
    several that takes it (swapping the roles, persisted under ``state_dir``, when
    that one was not the active one); marks namespaces down and probes them back;
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
        hooks: Sequence[GatewayHooks],
        data_dir: str | os.PathLike[str] | None,
        state_dir: str | os.PathLike[str] | None,
        clock: Callable[[], float],
        sleep: Callable[[float], Awaitable[None]],
    ) -> None:
        self.entity = entity
        self._retry = retry
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
        self._roles_store = RoleStore(
            Path(state_dir or default_state_dir()) / f"roles-{names[0]}-{names[1]}.json"
        )
        self.roles = self._roles_store.load(names[0], names[1])
        #: Namespaces marked down, with when: skipped until a probe succeeds.
        self.down: dict[str, float] = {}
        # Opening links ahead of sends (prepare_send); awaited, not cancelled, by aclose():
        # an SDK client cancelled halfway through opening can leave its socket open.
        self._preparing: set[asyncio.Task[None]] = set()

    # -- sending --------------------------------------------------------------------

    async def send_any(
        self, batch: Sequence[Message], attempt: Sequence[str]
    ) -> tuple[str | None, bool, TransportError | None]:
        """Try namespaces in order until one takes the batch; swap roles if needed.

        Returns:
            The namespace that took it (``None``: none did), whether the roles were
            swapped, and the last ``TransportError`` met on the way.
        """
        last: TransportError | None = None
        for ns in attempt:
            try:
                await self.send_to(ns, batch)
            except TransportError as exc:
                self.mark_down(ns, exc)
                last = exc
                continue
            failed_over = ns != self.roles.active
            if failed_over:
                self.set_roles(self.roles.swap(self._clock()))
            return ns, failed_over, last
        return None, False, last

    async def send_to(self, namespace: str, batch: Sequence[Message]) -> None:
        """Send with the retry policy; a batch the namespace refuses for size goes again
        in halves, in order, so that only a message too large on its own is refused
        (:func:`~gateway.geo._splitting.send_in_parts`)."""
        await send_in_parts(functools.partial(self._send_retried, namespace), batch,
                            namespace=namespace)

    async def _send_retried(self, namespace: str, batch: Sequence[Message]) -> None:
        """Send with the retry policy: ``attempts`` tries at most, none begun after
        ``max_delay``, a random exponential backoff between them."""
        transport = self.transports[namespace]
        retry = self._retry
        started = time.monotonic()
        try:
            # Most sends succeed at once: only one that failed pays for tenacity.
            await transport.send(self.entity, batch)
            return
        except TransportError:
            if retry.attempts <= 1 or time.monotonic() - started >= retry.max_delay:
                raise
        # The first backoff here, the later ones tenacity's: initial * 2**(n-1) before
        # attempt n + 1, as one AsyncRetrying over all the attempts would wait.
        await self._sleep(random.uniform(0, min(retry.initial_backoff, retry.max_backoff)))
        left = retry.max_delay - (time.monotonic() - started)
        retrying = AsyncRetrying(
            stop=stop_after_attempt(retry.attempts - 1) | stop_after_delay(max(0.0, left)),
            wait=wait_random_exponential(multiplier=2 * retry.initial_backoff,
                                         max=retry.max_backoff),
            retry=retry_if_exception_type(TransportError),
            reraise=True,
            sleep=self._sleep,
        )
        await retrying(transport.send, self.entity, batch)

    # -- health and roles -----------------------------------------------------------

    def mark_down(self, namespace: str, error: BaseException) -> None:
        """Skip ``namespace`` until a probe finds it healthy (``on_namespace_down``)."""
        if namespace not in self.down:
            self.down[namespace] = self._clock()
            logger.warning("namespace %s is down: %s", namespace, error)
            emit(self._hooks, "on_namespace_down", namespace=namespace, error=error)

    def set_roles(self, roles: RoleState) -> None:
        """Make ``roles`` current and persist them (``on_failover``)."""
        before = self.roles
        self.roles = roles
        self._roles_store.save(roles)
        logger.warning("failover: %s -> %s", before.active, roles.active)
        emit(
            self._hooks, "on_failover",
            from_namespace=before.active, to_namespace=roles.active, at=roles.changed_at,
        )

    def fail_back(self) -> None:
        """Make the primary active again (``on_failover``)."""
        self.set_roles(self.roles.fail_back(self._clock()))

    async def probe_down(self) -> None:
        """Probe the namespaces marked down; mark up (``on_namespace_up``) and reopen
        the links of those that answer."""
        for ns in list(self.down):
            try:
                await self.transports[ns].probe()
            except TransportError:
                continue
            if self.down.pop(ns, None) is None:
                continue  # marked up meanwhile
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
            except GatewayError as exc:
                logger.info("could not open %s ahead of a send: %s", ns, exc)

        await asyncio.gather(*(one(ns) for ns in namespaces if ns not in self.down))

    async def aclose(self) -> None:
        """Wait (bounded) for links being opened, then close the transports opened here."""
        if self._preparing:
            _, late = await asyncio.wait(self._preparing, timeout=_PREPARE_WAIT)
            for task in late:
                task.cancel()
        for transport in self._owned:
            await transport.aclose()
