"""The layout holds: no import loops, no reaching into another package's ``_`` modules,
``gateway/`` holds only its public face and its rooms, and modules stay near 400 lines.

The graph is read from the source by :mod:`tests.import_graph`; the checks on small
trees made here show that each rule fails when it should.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import import_graph

ROOT = Path(__file__).resolve().parents[1]

#: The longest a module may grow, and the modules allowed past it, each with its reason.
MAX_LINES = 450
LONGER: dict[str, str] = {}


@pytest.fixture(scope="module")
def edges() -> dict[str, list[import_graph.Edge]]:
    return import_graph.graph(ROOT)


def test_the_graph_sees_every_package_and_their_imports(edges):
    # Guards the checks below against silently reading nothing.
    assert {m.split(".")[0] for m in edges} == set(import_graph.PACKAGES)
    assert len(edges) > 100
    assert sum(map(len, edges.values())) > 300


def test_no_two_modules_import_each_other_around_a_loop(edges):
    loops = [import_graph.describe(loop) for loop in import_graph.cycles(edges)]
    assert loops == [], "import loops:\n" + "\n".join(loops)


def test_no_module_imports_another_packages_private_module(edges):
    reaches = [f"{e.source} (line {e.line}) imports {e.name}"
               for e in import_graph.private_reaches(edges)]
    assert reaches == [], "import the package's face instead:\n" + "\n".join(reaches)


def test_gateway_holds_only_its_public_face_and_its_rooms():
    modules = sorted(p.name for p in (ROOT / "gateway").glob("*.py"))
    assert modules == ["__init__.py", "aio.py", "errors.py"]
    rooms = sorted(p.name for p in (ROOT / "gateway").iterdir()
                   if p.is_dir() and (p / "__init__.py").exists())
    assert rooms == ["_support", "amqp", "cli", "consumer", "drill", "emulator", "geo",
                     "observability", "proxy", "relay", "stores", "transports"]


#: The most modules a folder holds: past it, a prefix shared by several files is a room.
MAX_MODULES = 20


def test_no_folder_holds_more_than_twenty_modules():
    halls = {
        str(folder.relative_to(ROOT)): n
        for package in import_graph.PACKAGES
        for folder in [ROOT / package, *(ROOT / package).rglob("*")]
        if folder.is_dir() and (folder / "__init__.py").exists()
        and (n := sum(1 for f in folder.glob("*.py") if f.name != "__init__.py")) > MAX_MODULES
    }
    assert halls == {}, "make rooms of these folders' shared prefixes"


def test_no_module_is_much_longer_than_400_lines():
    long = {
        str(path.relative_to(ROOT)): n
        for path in import_graph.modules(ROOT).values()
        if (n := len(path.read_text("utf-8").splitlines())) > MAX_LINES
    }
    assert {name: n for name, n in long.items() if name not in LONGER} == {}


# The checks themselves, on small trees.


def _tree(tmp_path: Path, files: dict[str, str]) -> dict[str, list[import_graph.Edge]]:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return import_graph.graph(tmp_path, ("pkg",))


def test_a_loop_made_only_for_type_hints_is_a_loop(tmp_path):
    edges = _tree(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from pkg.b import B\n",
        "pkg/b.py": ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                     "    from pkg.c import C\n"),
        "pkg/c.py": "def f():\n    from pkg import a\n",
    })
    loops = import_graph.cycles(edges)
    assert [import_graph.describe(loop) for loop in loops] == [
        "pkg.a (line 1) -> pkg.b (line 3) -> pkg.c (line 2) -> pkg.a"]


def test_a_faces_lazy_table_and_relative_imports_are_edges(tmp_path):
    edges = _tree(tmp_path, {
        "pkg/__init__.py": '_LAZY = {"Thing": "pkg.sub._impl", "Other": ".other"}\n',
        "pkg/other.py": "",
        "pkg/sub/__init__.py": "from ._impl import Thing\n",
        "pkg/sub/_impl.py": "import pkg\n",
    })
    targets = {m: sorted(e.target for e in out) for m, out in edges.items()}
    assert targets["pkg"] == ["pkg.other", "pkg.sub._impl"]
    assert targets["pkg.sub"] == ["pkg.sub._impl"]
    assert len(import_graph.cycles(edges)) == 1


def test_private_modules_belong_to_their_package_and_its_subpackages(tmp_path):
    edges = _tree(tmp_path, {
        "pkg/__init__.py": "from pkg.a._x import X\n",  # reaches into pkg.a: refused
        "pkg/a/__init__.py": "from pkg.a._x import X\n",  # its own: fine
        "pkg/a/_x.py": "from pkg._helpers import h\n",  # its parent's helper: fine
        "pkg/a/deep/__init__.py": "from pkg.a import _x\n",  # its parent's: fine
        "pkg/_helpers.py": "",
        "pkg/b.py": "import pkg.a._x\n",  # refused
    })
    assert sorted((e.source, e.target) for e in import_graph.private_reaches(edges)) == [
        ("pkg", "pkg.a._x"), ("pkg.b", "pkg.a._x")]
