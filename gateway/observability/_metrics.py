"""Prometheus metrics from the gateway's hooks: :class:`PrometheusMetrics`.

Give one to a sender or receiver (``hooks=PrometheusMetrics()``), or several: they
share the metric objects of their registry (:mod:`gateway.observability._families`).
The list of metrics, their types and labels is in docs/guides/observability.md.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from gateway.geo import GatewayHooks
from gateway.observability._families import Families, families, prometheus
from replication import ANY_NAMESPACE, MessageRejected, NamespaceMisconfigured, parse_destination

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from gateway.consumer import PartitionProgress

__all__ = ["PrometheusMetrics", "render_metrics"]


class PrometheusMetrics(GatewayHooks):
    """Hooks that keep the gateway's Prometheus metrics.

    Args:
        registry: the ``prometheus_client.CollectorRegistry`` to register in
            (default: the process's global ``REGISTRY``, which
            ``prometheus_client.start_http_server`` serves). Any number of
            ``PrometheusMetrics`` may share one registry.

    Raises:
        ConfigError: prometheus-client is not installed (the ``metrics`` extra).
    """

    def __init__(self, *, registry: CollectorRegistry | None = None) -> None:
        pc = prometheus()
        #: The registry the metrics are in (render it with :func:`render_metrics`).
        self.registry: CollectorRegistry = registry if registry is not None else pc.REGISTRY
        self._m: Families = families(self.registry)
        self._seen: set[str] = set()  # namespaces whose up gauge is set

    def __repr__(self) -> str:
        return f"PrometheusMetrics(registry={self.registry!r})"

    # -- sending ----------------------------------------------------------------------

    def on_sent(self, *, entity: str, count: int, namespaces: tuple[str, ...],
                buffered: tuple[str, ...], failed_over: bool, seconds: float,
                error: BaseException | None) -> None:
        m = self._m
        m.child(m.send_seconds, entity).observe(seconds)
        if error is not None:
            outcome = "rejected" if isinstance(error, MessageRejected) else "failed"
            where = getattr(error, "namespace", None) or ANY_NAMESPACE
            m.child(m.sent, entity, where, outcome).inc(count)
            return
        for namespace in namespaces:
            m.child(m.sent, entity, namespace, "sent").inc(count)
            if namespace not in self._seen:
                self._mark(namespace, up=True)
        for dest in buffered:
            m.child(m.sent, entity, parse_destination(dest)[0], "buffered").inc(count)
        if failed_over:
            m.child(m.failover_seconds, entity).observe(seconds)

    def on_failover(self, *, from_namespace: str, to_namespace: str, at: float) -> None:
        self._m.failovers.labels(from_namespace, to_namespace).inc()

    def on_buffered(self, *, destination: str, count: int) -> None:
        self._m.child(self._m.buffered_total, destination).inc(count)

    def on_backlog(self, *, destination: str, count: int, oldest_enqueued_at: float | None
                   ) -> None:
        m = self._m
        m.child(m.buffered, destination).set(count)
        with m.lock:
            first = destination not in m.oldest
            m.oldest[destination] = oldest_enqueued_at
        if first:
            m.oldest_age.labels(destination).set_function(
                functools.partial(m.age, destination))

    def on_replayed(self, *, destination: str, count: int, seconds: float) -> None:
        self._m.replayed.labels(destination).inc(count)
        self._m.replay_seconds.labels(destination).inc(seconds)

    def on_replay_failed(self, *, destination: str, error: BaseException) -> None:
        self._m.replay_failures.labels(destination, type(error).__name__).inc()

    # -- receiving --------------------------------------------------------------------

    def on_duplicate(self, *, message_id: str, namespace: str) -> None:
        self._m.child(self._m.duplicates, namespace).inc()

    def on_dedup_store(self, *, operation: str, count: int, seconds: float) -> None:
        self._m.child(self._m.dedup_seconds, operation).observe(seconds)

    # -- shared stores ----------------------------------------------------------------

    def on_store_down(self, *, store: str, error: BaseException) -> None:
        self._m.store_outages.labels(store).inc()
        self._m.store_up.labels(store).set(0)

    def on_store_up(self, *, store: str) -> None:
        self._m.store_up.labels(store).set(1)

    # -- namespaces -------------------------------------------------------------------

    def on_namespace_down(self, *, namespace: str, error: BaseException) -> None:
        self._m.outages.labels(namespace).inc()
        self._mark(namespace, up=False)
        if isinstance(error, (MessageRejected, NamespaceMisconfigured)):
            self._m.refused.labels(namespace).set(1)

    def on_namespace_up(self, *, namespace: str) -> None:
        self._mark(namespace, up=True)
        self._m.refused.labels(namespace).set(0)

    def _mark(self, namespace: str, *, up: bool) -> None:
        self._seen.add(namespace)
        self._m.up.labels(namespace).set(1 if up else 0)

    # -- partitions -------------------------------------------------------------------

    def on_partition_progress(
        self, *, namespace: str, entity: str, consumer_group: str, partition_id: str,
        owned: bool, lag_events: int, oldest_unsaved_at: float | None,
    ) -> None:
        m = self._m
        group = (namespace, entity, consumer_group)
        key = (*group, partition_id)
        with m.lock:
            owners = m.partitions.setdefault(group, set())
            if owned:
                owners.add(partition_id)
            else:
                owners.discard(partition_id)
            first = owned and key not in m.unsaved
            if owned:
                m.unsaved[key] = oldest_unsaved_at
            else:
                m.unsaved.pop(key, None)
            count = len(owners)
        m.child(m.owned, *group).set(count)
        if owned:
            m.child(m.lag_events, *key).set(lag_events)
            if first:
                m.child(m.lag_seconds, *key).set_function(
                    functools.partial(m.unsaved_age, key))
            if namespace not in self._seen:
                self._mark(namespace, up=True)
        else:
            # A partition read elsewhere now: its series go (the set stays bounded).
            m.remove(m.lag_events, *key)
            m.remove(m.lag_seconds, *key)

    def partition_progress(self, progress: PartitionProgress) -> None:
        """The same for a plain partition processor (it takes a callback, not hooks):
        ``AsyncPartitionProcessor(..., on_progress=metrics.partition_progress)``."""
        group = progress.group
        self.on_partition_progress(
            namespace=group.fully_qualified_namespace, entity=group.eventhub_name,
            consumer_group=group.consumer_group, partition_id=progress.partition_id,
            owned=progress.owned, lag_events=progress.lag_events,
            oldest_unsaved_at=progress.oldest_unsaved_at)

    # -- relay ------------------------------------------------------------------------

    def on_relay_request(self, *, namespace: str, method: str, status: int | None,
                         outcome: str) -> None:
        self._m.relay.labels(namespace, "none" if status is None else str(status),
                             outcome).inc()


def render_metrics(registry: CollectorRegistry | None = None) -> tuple[bytes, str]:
    """The metrics of ``registry`` (default: the global one) in the Prometheus text
    format, and its content type: what a ``/metrics`` endpoint answers.

    Raises:
        ConfigError: prometheus-client is not installed (the ``metrics`` extra).
    """
    pc = prometheus()
    body: bytes = pc.generate_latest(registry if registry is not None else pc.REGISTRY)
    return body, str(pc.CONTENT_TYPE_LATEST)
