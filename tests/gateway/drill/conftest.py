"""The relay emulator fixture of the relay tests, for the drill tests that use it."""

from tests.gateway.relay.conftest import HC, emulator

__all__ = ["HC", "emulator"]
