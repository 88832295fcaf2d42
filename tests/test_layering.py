"""The pure packages stay pure: ``replication`` and ``durable_queue`` import neither
``azure`` nor ``gateway``."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PURE_PACKAGES = ["replication", "durable_queue"]
FORBIDDEN = ("azure", "gateway")


def _forbidden(module: str | None) -> bool:
    return module is not None and module.split(".")[0] in FORBIDDEN


def test_importing_the_pure_packages_loads_no_azure_or_gateway_module():
    # Given a fresh interpreter
    script = """
import importlib, json, pkgutil, sys
import replication, durable_queue
for package in (replication, durable_queue):
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        importlib.import_module(info.name)
print(json.dumps(sorted(sys.modules)))
"""
    # When it imports replication, durable_queue and all their submodules
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    loaded = json.loads(result.stdout)
    # Then no azure or gateway module was loaded
    assert "replication" in loaded and "durable_queue" in loaded
    assert [m for m in loaded if m.split(".")[0] in FORBIDDEN] == []


def _sources():
    for package in PURE_PACKAGES:
        yield from sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("path", list(_sources()), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_pure_source_file_imports_azure_or_gateway(path):
    # Given a source file of a pure package / When its imports are read (anywhere in it)
    tree = ast.parse(path.read_text("utf-8"), filename=str(path))
    offending = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            offending += [alias.name for alias in node.names if _forbidden(alias.name)]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and _forbidden(node.module):
            offending.append(str(node.module))
    # Then none of them is azure or gateway
    assert offending == [], f"{path.relative_to(ROOT)} imports {offending}"


def test_the_static_check_sees_every_pure_package():
    # Guards the parametrisation above against silently checking nothing.
    files = {p.relative_to(ROOT).parts[0] for p in _sources()}
    assert files == set(PURE_PACKAGES)


@pytest.mark.parametrize(
    ("source", "bad"),
    [
        ("import azure.servicebus", True),
        ("from azure.eventhub import EventData", True),
        ("from gateway import errors", True),
        ("import gateway.geo._config as c", True),
        ("def f():\n    from gateway.errors import ConfigError", True),
        ("from replication import Message", False),
        ("import gatewayish", False),
        ("from . import gateway", False),
    ],
)
def test_the_static_check_itself(source, bad):
    tree = ast.parse(source)
    found = any(
        (isinstance(n, ast.Import) and any(_forbidden(a.name) for a in n.names))
        or (isinstance(n, ast.ImportFrom) and n.level == 0 and _forbidden(n.module))
        for n in ast.walk(tree)
    )
    assert found is bad
