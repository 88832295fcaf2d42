"""The lazy exports of geogateway's packages (PEP 562)."""

from __future__ import annotations

import math
import sys
import types
from collections.abc import Iterator

import pytest

import gateway.transports
from gateway._support.lazy import lazy_dir, lazy_exports


@pytest.fixture
def package() -> Iterator[types.ModuleType]:
    module = types.ModuleType("lazy_pkg")
    table = {"sqrt": "math"}
    vars(module).update(__getattr__=lazy_exports("lazy_pkg", table),
                        __dir__=lazy_dir("lazy_pkg", table))
    sys.modules["lazy_pkg"] = module
    yield module
    del sys.modules["lazy_pkg"]


def test_a_lazy_name_is_imported_and_kept(package: types.ModuleType) -> None:
    assert "sqrt" not in vars(package)
    assert package.sqrt is math.sqrt
    assert vars(package)["sqrt"] is math.sqrt  # later lookups skip __getattr__


def test_an_unknown_name_raises_attribute_error(package: types.ModuleType) -> None:
    with pytest.raises(AttributeError, match=r"^module 'lazy_pkg' has no attribute 'cbrt'$"):
        package.cbrt  # noqa: B018


def test_dir_lists_the_lazy_names(package: types.ModuleType) -> None:
    assert "sqrt" in dir(package)
    assert "__getattr__" in dir(package)


def test_a_relative_module_is_found_in_the_package() -> None:
    from gateway.transports.local import LocalTransport

    assert gateway.transports.LocalTransport is LocalTransport
