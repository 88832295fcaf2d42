"""Failover drills: send and receive through the gateway while namespaces fail.

A drill runs a sender and a de-duplicating receiver on two embedded namespaces,
injects a scenario while messages flow (through the same control files that
``geogateway namespace down`` writes), lets the durable queue replay, and reports
what arrived. It passes only when nothing was lost and no duplicate was delivered.

With ``transport="servicebus"`` or ``"eventhubs"`` the same namespaces are served by
``geogateway emulator`` (a child process the drill starts and stops) and the gateway
talks to them through the Azure SDK transports: Service Bus queues, or an event hub
read by a partition-balanced geo receiver. Outages are injected the same way.

With ``entity="topic"`` the queue scenarios run over a topic with two subscriptions,
a de-duplicating receiver on each, and every subscription must get every message
once (:mod:`gateway.drill._topics`).

The ``consumer-*`` scenarios instead run several receiver processes on a
partitioned entity and crash, add or remove them mid-run; see
:mod:`gateway.drill.consumers._scenario`.

Each run keeps its namespaces, queue, dedup and checkpoint files in a state folder of
its own, new for every run (``DATA_DIR/drill-TIME-XXXX``, or under the system's
temporary directory), so a drill run twice in one data dir starts from nothing both
times. The folder is removed when the drill passes and kept (for its files and logs)
when it fails or raises, or with ``keep_state=True``. Child processes (the emulator,
the workers) stop by themselves if the drill's process is killed
(:mod:`gateway._support.parent_watch`).

The runner (:func:`run_drill`) is :mod:`gateway.drill._runner`, the queue scenarios
:mod:`gateway.drill._queues`, and what the scenarios share (the scenario names,
progress, state folders) :mod:`gateway.drill._common`. The report and what its fields
mean: :mod:`gateway.drill._report`; the timeline every drill records
(:mod:`gateway.drill._timeline`) and its picture (:mod:`gateway.drill._picture`). The
relay drills (requests through a geo-redundant Azure Relay hybrid connection, while a
namespace is down, flaps or hangs) are :func:`run_relay_drill`, in
:mod:`gateway.drill._relay`. The outbox drill (an
application committing orders with outbox rows while its dispatchers are SIGKILLed, on
SQLite or PostgreSQL) is :func:`run_outbox_drill`, in :mod:`gateway.drill.outbox._scenario`.
"""

from __future__ import annotations

from gateway.drill._common import RelayScenario, Scenario
from gateway.drill._picture import (
    FAILOVER_COLOUR,
    drill_figure,
    find_chromium,
    screenshot,
    write_html,
    write_png,
)
from gateway.drill._relay import FIRST_ANSWER_TARGET, RelayDrillReport, run_relay_drill
from gateway.drill._report import HUNG_SEND_LIMIT, DrillReport, PartitionMove, WorkerAction
from gateway.drill._runner import ENTITIES, TRANSPORTS, run_drill
from gateway.drill._timeline import DrillTimeline, Window
from gateway.drill.outbox import OUTBOX_SCENARIO, STORES, OutboxDrillReport, run_outbox_drill

__all__ = ["ENTITIES", "FAILOVER_COLOUR", "FIRST_ANSWER_TARGET", "HUNG_SEND_LIMIT",
           "OUTBOX_SCENARIO", "STORES", "TRANSPORTS", "DrillReport", "DrillTimeline",
           "OutboxDrillReport", "PartitionMove", "RelayDrillReport", "RelayScenario", "Scenario",
           "Window", "WorkerAction",
           "drill_figure", "find_chromium", "run_drill", "run_outbox_drill", "run_relay_drill",
           "screenshot", "write_html", "write_png"]
