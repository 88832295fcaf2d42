"""The emulator's public names, and its independence from the Azure SDKs."""

from __future__ import annotations

import ast
from pathlib import Path

import gateway.emulator

_SOURCES = [*Path(gateway.emulator.__file__).parent.rglob("*.py"),
            Path(gateway.emulator.__file__).parent.parent / "cli" / "_emulator.py"]


def test_exported_members() -> None:
    # The emulator's own, or the shared AMQP front's that it re-exports (its policies).
    for name in gateway.emulator.__all__:
        member = getattr(gateway.emulator, name)
        assert getattr(member, "__module__", "gateway.emulator").startswith(
            ("gateway.emulator", "gateway.amqp.server")), name
    assert {"Emulator", "EmulatorThread", "DEFAULT_KEY"} <= set(gateway.emulator.__all__)


def test_the_emulator_does_not_import_azure() -> None:
    # The SDKs are the emulator's clients, never part of it.
    for path in _SOURCES:
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(n.split(".")[0] == "azure" for n in names), (path, names)


def test_the_emulator_process_loads_no_azure_module() -> None:
    # Nor indirectly, through the gateway package: an embedded Emulator needs no SDK.
    import subprocess
    import sys

    code = ("import sys, gateway.emulator; gateway.emulator.Emulator; "
            "gateway.emulator.EmulatorProcess; gateway.emulator.RelayEmulator; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'azure'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"
