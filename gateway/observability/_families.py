"""The Prometheus metrics of geogateway, made once per registry.

Each registry gets one :class:`Families` (the metric objects and the little state the
callback gauges read), shared by every :class:`~gateway.observability.PrometheusMetrics`
given that registry: a second one, or a second sender in the same process, reuses
them instead of registering the same names again (which ``prometheus_client``
refuses).

Names and labels follow the Prometheus conventions: a ``geogateway_`` prefix, base
units in the name (``_seconds``), ``_total`` on counters, and bounded label values
only (namespace and entity names, destinations, partition ids, status codes; never a
``MessageId``).
"""

from __future__ import annotations

import contextlib
import threading
import time
import weakref
from types import ModuleType
from typing import TYPE_CHECKING, Any

from replication import ConfigError

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

__all__ = ["Families", "families", "prometheus"]

#: Where a send's or a failover's duration falls (seconds).
SEND_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
FAILOVER_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
#: A de-duplication store call: a SQLite transaction, a PostgreSQL round trip.
DEDUP_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                 0.25, 1.0)


def prometheus() -> ModuleType:
    """``prometheus_client``, imported on first use.

    Raises:
        ConfigError: it is not installed.
    """
    try:
        import prometheus_client
    except ImportError:
        raise ConfigError("metrics need prometheus-client: pip install "
                          "'geogateway[metrics]'") from None
    return prometheus_client


class Families:
    """The metric objects of one registry, and what the callback gauges read."""

    def __init__(self, registry: CollectorRegistry) -> None:
        pc = prometheus()
        counter, gauge, histogram = pc.Counter, pc.Gauge, pc.Histogram
        r = registry
        # -- sending, failover, buffering ---------------------------------------------
        self.sent = counter(
            "geogateway_messages_sent", "Messages handed to send/send_batch, by the "
            "namespace that took them (outcome sent) or the durable queue destination's "
            "namespace (outcome buffered, '*': either), or failed/rejected.",
            ["entity", "namespace", "outcome"], registry=r)
        self.send_seconds = histogram(
            "geogateway_send_duration_seconds", "How long send/send_batch took, "
            "buffering included.", ["entity"], buckets=SEND_BUCKETS, registry=r)
        self.failovers = counter(
            "geogateway_failovers", "Role swaps: sends (or relay requests) moved from one "
            "namespace to the other, failbacks included.",
            ["from_namespace", "to_namespace"], registry=r)
        self.failover_seconds = histogram(
            "geogateway_failover_duration_seconds", "How long the send that failed over "
            "took, from its start to the other namespace taking it.", ["entity"],
            buckets=FAILOVER_BUCKETS, registry=r)
        self.buffered_total = counter(
            "geogateway_messages_buffered", "Messages written to the durable queue.",
            ["destination"], registry=r)
        self.buffered = gauge(
            "geogateway_buffered_messages", "Messages waiting in the durable queue.",
            ["destination"], registry=r)
        self.oldest_age = gauge(
            "geogateway_oldest_buffered_age_seconds", "Age of the oldest message waiting "
            "in the durable queue (0 when none waits): the data at risk.",
            ["destination"], registry=r)
        self.replayed = counter(
            "geogateway_messages_replayed", "Buffered messages sent by a replay.",
            ["destination"], registry=r)
        self.replay_seconds = counter(
            "geogateway_replay_duration_seconds", "Time spent replaying (replayed "
            "messages / this = replay throughput).", ["destination"], registry=r)
        self.replay_failures = counter(
            "geogateway_replay_failures", "Replays stopped by a durable queue error.",
            ["destination", "error"], registry=r)
        # -- receiving ---------------------------------------------------------------
        self.duplicates = counter(
            "geogateway_duplicates_suppressed", "Copies received and settled (or skipped) "
            "because their MessageId was delivered already.", ["namespace"], registry=r)
        self.dedup_seconds = histogram(
            "geogateway_dedup_store_duration_seconds", "De-duplication store calls: "
            "check (verdicts), done (marks), release (claims given back).",
            ["operation"], buckets=DEDUP_BUCKETS, registry=r)
        # -- namespaces --------------------------------------------------------------
        self.up = gauge(
            "geogateway_namespace_up", "1 while the namespace answers, 0 while it is "
            "marked down.", ["namespace"], registry=r)
        self.refused = gauge(
            "geogateway_namespace_refused", "1 when the namespace refuses this client (a "
            "wrong key, missing rights, a host name that does not resolve, no such "
            "entity).", ["namespace"], registry=r)
        self.outages = counter(
            "geogateway_namespace_outages", "Times the namespace was marked down.",
            ["namespace"], registry=r)
        # -- shared stores -----------------------------------------------------------
        self.store_up = gauge(
            "geogateway_store_up", "1 while the shared store (de-dup, checkpoints) "
            "answers, 0 while it is unavailable.", ["store"], registry=r)
        self.store_outages = counter(
            "geogateway_store_outages", "Times the shared store became unavailable.",
            ["store"], registry=r)
        # -- partitions --------------------------------------------------------------
        partition = ["namespace", "entity", "consumer_group", "partition"]
        self.owned = gauge(
            "geogateway_partitions_owned", "Partitions this process reads.",
            ["namespace", "entity", "consumer_group"], registry=r)
        self.lag_events = gauge(
            "geogateway_checkpoint_lag_events", "Events read past the partition's last "
            "checkpoint (a new owner would read them again).", partition, registry=r)
        self.lag_seconds = gauge(
            "geogateway_checkpoint_lag_seconds", "Age (by enqueued time) of the oldest "
            "event read past the partition's last checkpoint; 0 when none.",
            partition, registry=r)
        # -- relay -------------------------------------------------------------------
        self.relay = counter(
            "geogateway_relay_requests", "Relay request attempts, by namespace, HTTP "
            "status ('none': no answer) and outcome.",
            ["namespace", "status", "outcome"], registry=r)
        # What the callback gauges read, and what is known of each label set.
        self.oldest: dict[str, float | None] = {}
        self.unsaved: dict[tuple[str, ...], float | None] = {}
        self.partitions: dict[tuple[str, str, str], set[str]] = {}
        self.lock = threading.Lock()
        # The labelled children of the hot metrics: ``labels()`` takes a lock and
        # builds its key on every call, a few microseconds a send.
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}

    def child(self, metric: Any, *labels: str) -> Any:
        """``metric.labels(*labels)``, looked up once."""
        key = (id(metric), labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return found

    def remove(self, metric: Any, *labels: str) -> None:
        """Drop ``metric``'s series for ``labels`` (nothing when it has none)."""
        self._children.pop((id(metric), labels), None)
        with contextlib.suppress(KeyError):
            metric.remove(*labels)

    def age(self, destination: str) -> float:
        """Seconds since the oldest message of ``destination`` was put (0: none)."""
        oldest = self.oldest.get(destination)
        return 0.0 if oldest is None else max(0.0, time.time() - oldest)

    def unsaved_age(self, key: tuple[str, ...]) -> float:
        """Seconds since the oldest event read past a partition's checkpoint was
        enqueued (0: none)."""
        oldest = self.unsaved.get(key)
        return 0.0 if oldest is None else max(0.0, time.time() - oldest)


_BY_REGISTRY: weakref.WeakKeyDictionary[CollectorRegistry, Families] = (
    weakref.WeakKeyDictionary())
_LOCK = threading.Lock()


def families(registry: CollectorRegistry) -> Families:
    """The metrics of ``registry``, registered there on the first call."""
    with _LOCK:
        found = _BY_REGISTRY.get(registry)
        if found is None:
            found = _BY_REGISTRY[registry] = Families(registry)
        return found
