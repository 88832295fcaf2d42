"""The workers' order (tests/ordering.py): the slow tests lead the workers' shares, a file
with a module-scoped fixture stays together, and every test is still there once."""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest

from tests import ordering


class Item:
    def __init__(self, nodeid: str) -> None:
        self.nodeid = nodeid


def reorder(ids: list[str], workers: int) -> list[str]:
    items = [Item(i) for i in ids]
    config = types.SimpleNamespace(workerinput={"workercount": workers})
    ordering.pytest_collection_modifyitems(config, items)  # type: ignore[arg-type]
    return [item.nodeid for item in items]


def test_the_slow_tests_lead_each_share_and_a_module_fixtures_file_stays_whole(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # Given 40 tests in collection order, three of them slow, the site's two together
    site = "tests/docs/test_site.py"
    ids = [f"tests/a.py::t{i:02d}" for i in range(36)] + [f"{site}::build", f"{site}::page"]
    ids += ["tests/z.py::drill", "tests/z.py::quick"]
    durations = tmp_path / "durations.json"
    durations.write_text(json.dumps({"tests/z.py::drill": 30.0, "tests/a.py::t35": 2.0,
                                     f"{site}::build": 9.0}))
    monkeypatch.setattr(ordering, "DURATIONS", durations)
    # When 4 workers take them (worksteal cuts 4 shares of 10)
    order = reorder(ids, 4)
    shares = [order[i:i + 10] for i in range(0, 40, 10)]
    # Then the slowest leads the first share, the site's file the second, whole
    assert [share[0] for share in shares[:3]] == [
        "tests/z.py::drill", f"{site}::build", "tests/a.py::t35"]
    assert shares[1][1] == f"{site}::page"
    # and the rest keep their order, each test once
    assert sorted(order) == sorted(ids)
    rest = [i for i in order if i not in {"tests/z.py::drill", "tests/a.py::t35",
                                          f"{site}::build", f"{site}::page"}]
    assert rest == [i for i in ids if i in rest]


def test_without_workers_or_durations_the_order_is_the_collections(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    ids = ["tests/a.py::x", "tests/z.py::drill"]
    monkeypatch.setattr(ordering, "DURATIONS", tmp_path / "durations.json")  # none
    assert reorder(ids, 4) == ids
    (tmp_path / "durations.json").write_text('{"tests/z.py::drill": 30}')
    assert reorder(ids, 1) == ids
    assert reorder(ids, 2) == ["tests/z.py::drill", "tests/a.py::x"]
