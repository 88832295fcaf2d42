"""The order the test workers take the suite in: the slow tests first, one after another
at the head of each worker's share, so that none of them starts in the last minute.

pytest-xdist's ``worksteal`` gives each of ``n`` workers a contiguous ``1/n`` of the
collected tests and lets an idle worker steal from the tail of the longest queue. In
collection order the slowest tests (drills, the docs site, the README's own drill) sat
in the tails and were stolen and started last: a 30 s test begun in the last half
minute is a run 30 s longer.

``tests/durations.json`` holds what each test slower than half a second took in a run
of the suite (setup, call and teardown, in seconds). A file with a module-scoped
fixture stays together (its fixture is set up once); every other slow test is placed
alone. The slow units are dealt round the workers' shares, slowest first, and each share
is then filled with the remaining tests in their collection order. Without xdist, or
without the file, the order is the collection's.

Refresh the file after adding slow tests (the run writes it, then commit it)::

    .venv/bin/python -m pytest -q -n 10 --dist worksteal --durations-out tests/durations.json
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

import pytest

DURATIONS = Path(__file__).with_name("durations.json")
#: Tests quicker than this are not kept in the file, and are not moved.
SLOW = 0.5
#: Files whose tests share a module-scoped fixture, kept together.
TOGETHER = ("tests/docs/test_site.py", "tests/docs/test_docstrings.py",
            "tests/gateway/drill/test_picture.py", "tests/test_import_graph.py")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--durations-out", default=None, metavar="FILE",
                     help="write what each test slower than 0.5 s took to FILE (JSON)")


def _known() -> dict[str, float]:
    try:
        return {str(k): float(v) for k, v in json.loads(DURATIONS.read_text()).items()}
    except (OSError, ValueError, AttributeError):
        return {}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    workers = int(getattr(config, "workerinput", {}).get("workercount", 0))
    known = _known()
    if workers < 2 or not known:
        return
    units: dict[str, list[pytest.Item]] = defaultdict(list)
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        units[path if path in TOGETHER else item.nodeid].append(item)
    took = {key: sum(known.get(item.nodeid, 0.0) for item in unit)
            for key, unit in units.items()}
    slow = sorted((key for key in units if took[key] >= SLOW), key=lambda k: -took[k])
    moved = {id(item) for key in slow for item in units[key]}
    rest = [item for item in items if id(item) not in moved]
    shares: list[list[pytest.Item]] = [[] for _ in range(workers)]
    for i, key in enumerate(slow):
        shares[i % workers].extend(units[key])
    # Fill the shares to equal lengths (as worksteal cuts them) with the rest, in order.
    size, extra = divmod(len(items), workers)
    start = 0
    for i, share in enumerate(shares):
        take = max(0, size + (i < extra) - len(share))
        share.extend(rest[start:start + take])
        start += take
    shares[-1].extend(rest[start:])
    items[:] = [item for share in shares for item in share]


_took: dict[str, float] = defaultdict(float)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _took[report.nodeid] += report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    # In the controller of an xdist run (its workers' reports come to it) or a plain run.
    out = session.config.getoption("--durations-out")
    if out and os.environ.get("PYTEST_XDIST_WORKER") is None:
        slow = {k: round(v, 2) for k, v in sorted(_took.items()) if v >= SLOW}
        Path(out).write_text(json.dumps(slow, indent=0) + "\n")
