"""Runs one document's snippets in order (a child process of tests/docs/test_snippets.py).

Usage: python snippet_child.py SNIPPETS.json WORKDIR. Prints ``FAILED path:line`` and
the traceback of the first snippet that raises, and exits 1.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import inspect
import json
import os
import socket
import sys
import traceback
from pathlib import Path
from typing import Any


def start_fixture(name: str, scope: dict[str, Any], stack: contextlib.ExitStack,
                  work: Path) -> None:
    if name == "emulator":
        from gateway.emulator import Emulator, EmulatorThread

        emu = stack.enter_context(EmulatorThread(Emulator(
            {"primary": 0, "secondary": 0}, data_dir=work / "emulator", queues=["orders"])))
        scope["PRIMARY_CONNECTION_STRING"] = emu.connection_string("primary")
        scope["SECONDARY_CONNECTION_STRING"] = emu.connection_string("secondary")
        scope["PRIMARY_CERTIFICATE"] = emu.certificate
    elif name == "relay":
        from gateway.relay import (
            GeoRelayListener,
            RelayEmulator,
            RelayRequest,
            RelayResponse,
            RelayThread,
        )

        relay = stack.enter_context(RelayThread(RelayEmulator(
            {"primary": 0, "secondary": 0}, ["orders"], data_dir=work / "relay-emulator")))

        async def echo(request: RelayRequest) -> RelayResponse:
            return RelayResponse(status=200, body=request.body)

        endpoints = [relay.endpoint(name, "orders") for name in ("primary", "secondary")]
        thread = RelayThread(GeoRelayListener(endpoints, echo))
        listener = stack.enter_context(thread)
        thread.call(listener.wait_connected())
        scope["WEST_CONN"] = relay.connection_string("primary")
        scope["NORTH_CONN"] = relay.connection_string("secondary")
    elif name == "postgres":
        import psycopg

        with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS orders "
                         "(id text PRIMARY KEY, body bytea, total integer)")
    elif name == "config":  # in the snippet's working directory
        Path("geogateway.toml").write_text(
            'primary = "local://primary"\nsecondary = "local://secondary"\n'
            'entity = "orders"\n')


def main() -> int:
    snippets = json.loads(Path(sys.argv[1]).read_text())
    work = Path(sys.argv[2])
    scope: dict[str, Any] = {"__name__": "__main__"}
    # a port of its own for a snippet that serves metrics (tests run side by side)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        os.environ["METRICS_PORT"] = str(probe.getsockname()[1])
    started: set[str] = set()
    with contextlib.ExitStack() as stack:
        for number, snippet in enumerate(snippets):
            # each snippet in a new working directory, with new namespaces and state
            here = work / f"snippet-{number}"
            (here / "namespaces").mkdir(parents=True)
            os.chdir(here)
            os.environ["GEOGATEWAY_DATA_DIR"] = str(here / "namespaces")
            os.environ["GEOGATEWAY_STATE_DIR"] = str(here / "state")
            try:
                for name in snippet["fixtures"]:
                    if name not in started or name == "config":
                        started.add(name)
                        start_fixture(name, scope, stack, work)
                code = compile(snippet["code"], snippet["where"], "exec",
                               flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
                result = eval(code, scope)
                if inspect.iscoroutine(result):
                    asyncio.run(result)
            except BaseException:
                print(f"FAILED {snippet['where']}", flush=True)
                traceback.print_exc()
                return 1
            print(f"ran {snippet['where']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
