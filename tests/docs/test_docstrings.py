"""Every public name of the documented packages has a docstring of its own.

The API reference is made from them (mkdocstrings, which reads the source as griffe
does): a name without one is a heading with nothing under it. A module attribute's
docstring is the string right after its assignment (``#:`` comments are not read).
"""

from __future__ import annotations

from pathlib import Path

import griffe
import pytest

ROOT = Path(__file__).resolve().parents[2]
#: The packages the API reference documents (docs/reference/api/), each by its ``__all__``.
PACKAGES = ["gateway", "gateway.aio", "gateway.transports", "gateway.stores", "gateway.consumer",
            "gateway.relay", "gateway.observability", "replication", "durable_queue"]


@pytest.fixture(scope="module")
def modules() -> griffe.ModulesCollection:
    loader = griffe.GriffeLoader(search_paths=[str(ROOT)])
    for top in ("gateway", "replication", "durable_queue"):
        loader.load(top)
    loader.resolve_aliases(implicit=False, external=False)
    return loader.modules_collection


def undocumented(module: griffe.Module) -> list[str]:
    """The names of ``module.__all__`` whose object has no docstring."""
    missing = []
    for name in module.exports or ():
        if name == "__version__":
            continue
        obj = module[name]
        target = obj.final_target if obj.is_alias else obj
        if target.docstring is None or not target.docstring.value.strip():
            missing.append(f"{name} ({target.path})")
    return missing


@pytest.mark.parametrize("package", PACKAGES)
def test_every_public_name_has_a_docstring(modules: griffe.ModulesCollection,
                                           package: str) -> None:
    assert undocumented(modules[package]) == []


def test_a_name_without_a_docstring_is_found(tmp_path: Path) -> None:
    # Given a package that exports a documented class and a bare constant
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text(
        '__all__ = ["Good", "BARE", "NOTED"]\n'
        'class Good:\n    """Documented."""\n'
        "BARE = 1\n"
        '#: a comment is not a docstring\nNOTED = 2\n')
    module = griffe.load("pkg", search_paths=[str(tmp_path)])
    # Then both constants are reported, the class is not
    assert undocumented(module) == ["BARE (pkg.BARE)", "NOTED (pkg.NOTED)"]
