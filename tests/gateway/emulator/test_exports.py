"""The emulator's public names, and its independence from the Azure SDKs."""

from __future__ import annotations

import ast
from pathlib import Path

import gateway.emulator

_SOURCES = [*Path(gateway.emulator.__file__).parent.glob("*.py"),
            Path(gateway.emulator.__file__).parent.parent / "_cli_emulator.py"]


def test_exported_members() -> None:
    for name in gateway.emulator.__all__:
        member = getattr(gateway.emulator, name)
        assert getattr(member, "__module__", "gateway.emulator").startswith(
            "gateway.emulator"), name
    assert {"Emulator", "EmulatorThread", "DEFAULT_KEY"} <= set(gateway.emulator.__all__)


def test_the_emulator_does_not_import_azure() -> None:
    # The SDKs are the emulator's clients, never part of it.
    for path in _SOURCES:
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(n.split(".")[0] == "azure" for n in names), (path, names)
