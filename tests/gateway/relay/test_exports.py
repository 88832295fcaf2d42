"""gateway.relay's public names; aiohttp loaded only with the listener or the emulator."""

from __future__ import annotations

import inspect
import subprocess
import sys

import gateway.relay


def test_exported_members() -> None:
    for name in gateway.relay.__all__:
        member = getattr(gateway.relay, name)
        if isinstance(member, type) or inspect.isfunction(member):  # not the type aliases
            # The emulator is re-exported from its own room (gateway.emulator.relay).
            assert member.__module__.startswith(("gateway.relay", "gateway.emulator.relay")), name
    assert {"GeoRelayListener", "RelayEmulator", "RelayEndpoint", "asgi_handler",
            "ProtocolError"} <= set(gateway.relay.__all__)


def test_public_classes_have_docstrings() -> None:
    for name in gateway.relay.__all__:
        member = getattr(gateway.relay, name)
        if isinstance(member, type):
            assert member.__doc__ and member.__doc__.strip(), name


def test_importing_the_package_does_not_load_aiohttp() -> None:
    code = ("import sys, gateway.relay; assert 'aiohttp' not in sys.modules; "
            "gateway.relay.GeoRelayListener; assert 'aiohttp' not in sys.modules; "
            "gateway.relay.RelayEmulator; assert 'aiohttp' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
