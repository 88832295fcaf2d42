"""Start-up of the ``geogateway`` command and of ``import gateway``: heavy modules (the
Azure SDKs, aiohttp, rich, sqlite-utils, anyio, httpx) are imported only where used.

Each check runs in a fresh interpreter and reads its ``sys.modules``; the time itself
is measured by ``benchmarks/bench_startup.py``, not asserted here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
HEAVY = ("azure", "aiohttp", "rich", "sqlite_utils", "anyio", "httpx", "uamqp", "pyamqp")

LOADED = """
import json, sys
{body}
print(json.dumps(sorted(sys.modules)), file=sys.__stderr__)
"""


def loaded_after(body: str, tmp_path: Path) -> set[str]:
    """The top-level packages loaded once ``body`` ran in a fresh interpreter."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GEOGATEWAY_")}
    env["GEOGATEWAY_DATA_DIR"] = str(tmp_path / "data")
    proc = subprocess.run([sys.executable, "-c", LOADED.format(body=body)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    return {name.split(".")[0] for name in json.loads(proc.stderr.strip().splitlines()[-1])}


def modules_after(body: str, tmp_path: Path) -> set[str]:
    """Every module (full dotted names) loaded once ``body`` ran in a fresh interpreter."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GEOGATEWAY_")}
    env["GEOGATEWAY_DATA_DIR"] = str(tmp_path / "data")
    proc = subprocess.run([sys.executable, "-c", LOADED.format(body=body)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    return set(json.loads(proc.stderr.strip().splitlines()[-1]))


def heavy(modules: set[str]) -> list[str]:
    return sorted(modules & set(HEAVY))


def cli_run(*args: str) -> str:
    return ("from gateway.cli import main\n"
            f"code = main({list(args)!r})\n"
            "assert code == 0, code")


@pytest.mark.parametrize(
    "body",
    [
        "import gateway",
        "import gateway.aio",
        "import gateway.errors",
        "import gateway.cli",
        "from gateway import ConfigError, GatewayError",
        pytest.param(cli_run("--help"), id="geogateway --help"),
        pytest.param(cli_run("--version"), id="geogateway --version"),
        pytest.param(cli_run("namespace", "--help"), id="geogateway namespace --help"),
    ],
)
def test_imports_and_help_load_no_heavy_module(body: str, tmp_path: Path) -> None:
    # Given a fresh interpreter / When it imports gateway or runs `geogateway --help`
    loaded = loaded_after(body, tmp_path)
    # Then neither the Azure SDKs nor aiohttp, rich, sqlite-utils, anyio, httpx came in
    assert "gateway" in loaded
    assert heavy(loaded) == []


@pytest.mark.parametrize(
    "args",
    [("namespace", "down", "primary"), ("namespace", "up", "primary"),
     ("namespace", "faults", "secondary", "--latency", "0.5")],
)
def test_namespace_control_commands_load_no_heavy_module(args: tuple[str, ...],
                                                         tmp_path: Path) -> None:
    loaded = loaded_after(cli_run(*args), tmp_path)
    assert heavy(loaded) == []
    # And the command did its work
    assert (tmp_path / "data" / f"{args[2]}.control.json").exists()


@pytest.mark.parametrize(
    "body",
    ["import gateway.consumer", "import gateway.drill", "import gateway.cli._drill",
     "import gateway.cli._consumer", "from gateway import GeoSender, GeoReceiver"],
)
def test_only_the_blob_store_brings_in_the_blob_sdk(body: str, tmp_path: Path) -> None:
    # The consumer, the drill and their commands use the Blob SDK only for the blob
    # checkpoint store; importing them must not cost its import (most of 0.6 s).
    loaded = loaded_after(body, tmp_path)
    assert sorted(loaded & {"azure", "aiohttp"}) == []


def test_the_lazy_names_still_resolve_to_the_real_objects(tmp_path: Path) -> None:
    # The names that are imported on first use are the very classes of their modules.
    loaded = loaded_after(
        "import gateway, gateway.aio, gateway.transports\n"
        "from gateway.geo._client import GeoSender\n"
        "from gateway.geo.sender._sender import AsyncGeoSender\n"
        "from gateway.transports.local import LocalTransport\n"
        "assert gateway.GeoSender is GeoSender\n"
        "assert gateway.aio.AsyncGeoSender is AsyncGeoSender\n"
        "assert gateway.transports.LocalTransport is LocalTransport\n"
        "assert {'GeoSender', 'Message'} <= set(dir(gateway))\n",
        tmp_path,
    )
    assert "anyio" in loaded  # the sender really was imported


def test_an_unknown_attribute_is_still_an_attribute_error() -> None:
    import gateway
    import gateway.aio
    import gateway.transports

    for module in (gateway, gateway.aio, gateway.transports):
        with pytest.raises(AttributeError, match="Nonesuch"):
            module.Nonesuch  # noqa: B018


HELP = """
import io, contextlib
from gateway.cli import COMMANDS, cli, main
if {load_all}:
    for name in COMMANDS:
        assert cli.get_command(None, name).name == name
out = io.StringIO()
with contextlib.redirect_stdout(out):
    main(["--help"])
print(out.getvalue())
"""


def test_help_lists_each_command_with_its_own_summary(tmp_path: Path) -> None:
    # Given `geogateway --help` from the summaries kept in COMMANDS (nothing imported),
    # and the same after every subcommand's module was imported
    def help_text(load_all: bool) -> str:
        proc = subprocess.run(
            [sys.executable, "-c", HELP.format(load_all=load_all)], cwd=ROOT,
            capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "200"})
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    lazy, loaded = help_text(False), help_text(True)
    # Then both list the same commands with the same words
    assert "namespace" in lazy and "Take embedded namespaces down" in lazy
    assert lazy == loaded


#: What `geogateway --help` once imported without needing it (``python -X importtime``):
#: every module of ``replication`` (only its error tree is needed), and with them
#: dataclasses, hashlib, hmac, random and base64; logging (only a subcommand that runs
#: sets it up); shutil with bz2 and lzma (click asks shutil for the terminal's width).
NOT_FOR_HELP = ("logging", "shutil", "bz2", "lzma", "dataclasses", "hashlib", "hmac",
                "random", "base64", "replication._deadlines", "replication._dedup",
                "replication._message", "replication._policy", "replication._sessions")


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(cli_run("--help"), id="geogateway --help"),
        pytest.param(cli_run("-h"), id="geogateway -h"),
        pytest.param("import gateway.cli", id="import gateway.cli"),
        pytest.param("import gateway", id="import gateway"),
    ],
)
def test_help_imports_nothing_it_does_not_need(body: str, tmp_path: Path) -> None:
    # Given what a bare interpreter loads (the site's own imports are not ours)
    bare = modules_after("pass", tmp_path)
    # When `geogateway --help` runs (or the imports it starts with)
    loaded = modules_after(body, tmp_path) - bare
    # Then none of what it once imported for nothing came in
    assert sorted(loaded & set(NOT_FOR_HELP)) == []
    # And of replication, only the error tree
    assert sorted(m for m in loaded if m.startswith("replication")) == [
        "replication", "replication._errors"]
