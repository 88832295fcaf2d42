"""The namespace outages of ``AsyncGeoPartitionReceiver`` (a mixin over its state): a
namespace whose processor fails is one warning and an ``on_namespace_down`` hook, then
probed until it answers (one "is back" warning and ``on_namespace_up``)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from gateway.consumer import BalanceSettings, PartitionContext
from gateway.geo._hooks import GatewayHooks, emit
from gateway.transports.base import Transport
from replication import StoreUnavailable, TransportError

__all__ = ["ErrorCallback", "NamespaceOutages"]

logger = logging.getLogger("geogateway.consumer")

ErrorCallback = Callable[[PartitionContext | None, BaseException], Awaitable[None]]


class NamespaceOutages:
    """Reports, and probes, the namespaces a partition receiver cannot read."""

    entity: str
    _hooks: list[GatewayHooks]
    _transports: list[Transport]
    _balance: BalanceSettings | None
    _on_error: ErrorCallback | None
    _stopping: asyncio.Event
    _down: set[str]
    _watches: dict[str, asyncio.Task[None]]

    async def _error(
        self, namespace: str, ctx: PartitionContext | None, exc: BaseException
    ) -> None:
        if isinstance(exc, TransportError):
            # Once per outage, however often the balancing loop or a reader retries
            # (each cycle with fast balancing); a traceback would say nothing more.
            if namespace not in self._down:
                self._down.add(namespace)
                # The balancing loop's only call to the namespace lists its partitions.
                what = (f"listing the partitions of {self.entity}" if ctx is None
                        else f"reading partition {ctx.partition_id} of {self.entity}")
                logger.warning("namespace %s is unavailable: %s failed (%s); retrying "
                               "until it is back", namespace, what, exc)
                emit(self._hooks, "on_namespace_down", namespace=namespace, error=exc)
            if namespace not in self._watches and not self._stopping.is_set():
                self._watches[namespace] = asyncio.get_running_loop().create_task(
                    self._watch(namespace))
        elif not isinstance(exc, StoreUnavailable):  # a store reports its outage itself
            logger.error("%s: %s", ctx or namespace, exc, exc_info=exc)
        if self._on_error is not None:
            await self._on_error(ctx, exc)

    async def _watch(self, namespace: str) -> None:
        """Probe a namespace marked down (a listing of its partitions, every balance
        interval) until it answers: an idle entity brings no event to say it is back."""
        transport = next(t for t in self._transports if t.namespace == namespace)
        interval = (self._balance or BalanceSettings()).interval
        while namespace in self._down:
            await asyncio.sleep(interval)
            try:
                await transport.get_partition_ids(self.entity)
            except Exception:  # still down: the processor reports each failure
                continue
            self._back(namespace, f"listed the partitions of {self.entity}")
        self._watches.pop(namespace, None)

    def _back(self, namespace: str, how: str) -> None:
        if namespace not in self._down:
            return  # an event or the probe said so first
        self._down.discard(namespace)
        logger.warning("namespace %s is back: %s", namespace, how)
        emit(self._hooks, "on_namespace_up", namespace=namespace)
