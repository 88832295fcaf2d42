"""AsyncGeoPartitionReceiver with a namespace down: what it logs, reports and hooks.

An outage is one warning naming the namespace and what failed, and one when it is
back; never a traceback on every balance cycle (about 20 a second with these fast
settings), while ``on_error`` still gets every failure.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from gateway.consumer import PartitionContext
from gateway.transports import LocalNamespace
from replication import NamespaceUnavailable
from tests.gateway.conftest import Recorder, wait_for
from tests.gateway.geo.partitions.test_partitions import HUB, Handled, Running, hubs, receiver

__all__ = ["hubs"]  # the fixture, used by name

pytestmark = pytest.mark.anyio


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


async def test_a_namespace_down_at_start_is_one_warning_and_one_back_line_not_tracebacks(
    tmp_path: Path, hubs: dict[str, LocalNamespace], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    # Given the primary down before a geo partition receiver starts (fast balancing)
    hubs["primary"].down()
    hooks, handled = Recorder(), Handled()
    errors: list[tuple[PartitionContext | None, BaseException]] = []

    async def on_error(ctx: PartitionContext | None, exc: BaseException) -> None:
        errors.append((ctx, exc))

    async with receiver(tmp_path, hooks=hooks, on_error=on_error) as geo:
        running = Running(geo, handled.handler())
        # When many balance cycles fail to list the primary's partitions
        await wait_for(lambda: len(errors) >= 10)
        # Then on_error got every failure, as the balancing loop's (ctx None)
        assert all(ctx is None and isinstance(exc, NamespaceUnavailable)
                   and exc.namespace == "primary" for ctx, exc in errors)
        # And the log holds one warning, naming the namespace and what failed
        [down] = warnings(caplog)
        assert down.startswith("namespace primary is unavailable: listing the partitions "
                               f"of {HUB} failed")
        assert "store unavailable" not in caplog.text
        # And no traceback at all
        assert not [r for r in caplog.records if r.exc_info] and "Traceback" not in caplog.text
        assert [kw["namespace"] for kw in hooks.named("on_namespace_down")] == ["primary"]
        assert geo.down == {"primary"}

        # When the primary comes back
        hubs["primary"].up()
        # Then one more warning says so, and the hook and `down` follow
        await wait_for(lambda: geo.down == frozenset())
        assert warnings(caplog) == [down, f"namespace primary is back: listed the partitions "
                                          f"of {HUB}"]
        assert [kw["namespace"] for kw in hooks.named("on_namespace_up")] == ["primary"]
        # And its partitions are claimed and read
        await wait_for(lambda: len(geo.owned["primary"]) == 4)
        await running.finish()
    assert not [r for r in caplog.records if r.exc_info]
    assert len(warnings(caplog)) == 2


async def test_a_namespace_lost_while_reading_is_one_warning_naming_the_partition(
    tmp_path: Path, hubs: dict[str, LocalNamespace], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    # Given a receiver reading both namespaces' partitions
    hooks, handled = Recorder(), Handled()
    async with receiver(tmp_path, hooks=hooks) as geo:
        running = Running(geo, handled.handler())
        await wait_for(lambda: all(len(geo.owned.get(ns, ())) == 4
                                   for ns in ("primary", "secondary")))
        # When the secondary goes down while its readers poll, and stays down a while
        hubs["secondary"].down()
        await wait_for(lambda: geo.down == {"secondary"})
        await wait_for(lambda: len(hooks.named("on_namespace_down")) == 1)
        # Then one warning names it and the partition read that failed, no traceback
        [down] = warnings(caplog)
        assert down.startswith("namespace secondary is unavailable: reading partition ")
        assert f"of {HUB} failed" in down
        # And when it comes back with nothing new to read, that is said too
        hubs["secondary"].up()
        await wait_for(lambda: geo.down == frozenset())
        assert warnings(caplog)[1:] == [f"namespace secondary is back: listed the partitions "
                                        f"of {HUB}"]
        await running.finish()
    assert not [r for r in caplog.records if r.exc_info]
    assert [kw["namespace"] for kw in hooks.named("on_namespace_up")] == ["secondary"]
