"""The metrics scraped over HTTP while a drill runs: a real Prometheus endpoint
(``prometheus_client``'s own server on 127.0.0.1) read with a real HTTP client (httpx)
during the both-down drill on the embedded namespaces.

The scrapes are taken at moments the drill itself marks, not after sleeps: before the
drill, when the first message is buffered (both namespaces are down by then, and the
primary's outage made the sender fail over before that), when the 40th is buffered,
at each replay, and after the drill.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.parser import text_string_to_metric_families

from gateway.drill import Scenario, run_drill
from gateway.geo import GatewayHooks
from gateway.observability import PrometheusMetrics

pytestmark = pytest.mark.anyio

QUEUE_DESTINATION = "*/drill"  # passive sends while both namespaces are down


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a scrape: (name, sorted labels) -> value."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


class Scrape:
    """One scrape's values."""

    def __init__(self, text: str) -> None:
        self.values = samples(text)

    def get(self, name: str, **labels: str) -> float:
        """The sample's value; 0 when the series does not exist (yet)."""
        return self.values.get((name, tuple(sorted(labels.items()))), 0.0)

    def total(self, name: str) -> float:
        return sum(v for (n, _), v in self.values.items() if n == name)

    def buffered(self) -> float:
        return self.get("geogateway_buffered_messages", destination=QUEUE_DESTINATION)

    def oldest_age(self) -> float:
        return self.get("geogateway_oldest_buffered_age_seconds",
                        destination=QUEUE_DESTINATION)


class Scraper(GatewayHooks):
    """Scrapes the endpoint when the drill's sender buffers and replays."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.client = httpx.Client(timeout=10.0)
        self.buffered = 0
        self.replayed = 0
        self.at_buffered: dict[int, Scrape] = {}
        #: How many a replay had sent at each buffered scrape: on a loaded machine a
        #: namespace slow past its deadline is marked down, and comes back, before both
        #: are down, and what it buffered meanwhile is replayed. Counted batch by
        #: batch from the backlog reports (``on_replayed`` comes at a drain's end,
        #: and a drain may still be going at the 40th buffered message).
        self.drained = 0
        self.drained_at: dict[int, int] = {}
        self._backlog: dict[str, int] = {}
        self.at_replayed: list[Scrape] = []

    def scrape(self) -> Scrape:
        response = self.client.get(self.url)
        response.raise_for_status()
        assert response.headers["content-type"].startswith("text/plain")
        return Scrape(response.text)

    def on_buffered(self, *, destination: str, count: int) -> None:
        self.buffered += count
        if self.buffered in (1, 40):
            self.at_buffered[self.buffered] = self.scrape()
            self.drained_at[self.buffered] = self.drained

    def on_backlog(self, *, destination: str, count: int, oldest_enqueued_at: float | None
                   ) -> None:
        # Puts only raise a destination's count: a fall is what a replay sent.
        before = self._backlog.get(destination, 0)
        self.drained += max(0, before - count)
        self._backlog[destination] = count

    def on_replayed(self, *, destination: str, count: int, seconds: float) -> None:
        self.replayed += count
        self.at_replayed.append(self.scrape())


@pytest.fixture
def endpoint() -> Iterator[tuple[CollectorRegistry, str]]:
    registry = CollectorRegistry()
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    try:
        yield registry, f"http://127.0.0.1:{server.server_port}/metrics"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


async def test_a_scrape_during_a_both_down_drill_sees_failover_backlog_and_its_age(
    endpoint: tuple[CollectorRegistry, str], tmp_path: Path
) -> None:
    # Given metrics served over HTTP, and a hook that scrapes them as the drill goes
    registry, url = endpoint
    scraper = Scraper(url)
    before = scraper.scrape()
    # When a both-down drill runs with the metrics among its hooks
    report = await run_drill(
        scenario=Scenario.BOTH_DOWN, mode="passive", messages=400,
        data_dir=tmp_path / "drill", settle_timeout=30.0,
        hooks=[PrometheusMetrics(registry=registry), scraper],
    )
    after = scraper.scrape()
    scraper.client.close()
    assert report.passed and report.lost == 0, report
    assert report.buffered >= 40, report  # both were down for 5% of the messages or more
    first, later = scraper.at_buffered[1], scraper.at_buffered[40]
    # Then the failover counter went up: the primary failed before both were down
    assert before.total("geogateway_failovers_total") == 0
    assert first.get("geogateway_failovers_total", from_namespace="primary",
                     to_namespace="secondary") >= 1
    assert first.get("geogateway_failover_duration_seconds_count", entity="drill") >= 1
    # and the buffered gauge rose with the backlog, while the oldest message aged
    # (less what was replayed by then: none unless a namespace came back meanwhile)
    assert before.buffered() == 0
    drained = scraper.drained_at[40] - scraper.drained_at[1]
    assert first.buffered() >= 1 and later.buffered() >= 40 - scraper.drained_at[40]
    assert first.oldest_age() > 0 and later.oldest_age() > 0
    if drained == 0:
        assert first.buffered() < later.buffered()
        assert first.oldest_age() < later.oldest_age()
    assert later.get("geogateway_namespace_up", namespace="primary") == 0
    assert later.get("geogateway_namespace_up", namespace="secondary") == 0
    # and fell back to nothing once the replay had sent it all
    assert scraper.at_replayed, "no replay was scraped"
    assert scraper.at_replayed[-1].buffered() == 0
    assert after.buffered() == 0 and after.oldest_age() == 0
    assert after.get("geogateway_messages_replayed_total",
                     destination=QUEUE_DESTINATION) == report.buffered
    assert after.get("geogateway_messages_buffered_total",
                     destination=QUEUE_DESTINATION) == report.buffered
    sent = sum(after.get("geogateway_messages_sent_total", entity="drill", namespace=ns,
                         outcome="sent") for ns in ("primary", "secondary"))
    assert sent + after.get("geogateway_messages_sent_total", entity="drill",
                            namespace="*", outcome="buffered") == 400
    assert after.get("geogateway_namespace_up", namespace="primary") == 1
    assert after.total("geogateway_dedup_store_duration_seconds_count") > 0
