"""The Azure Relay Hybrid Connections emulator: per namespace a loopback port that
serves listeners and senders as the service does."""

from gateway.emulator.relay._emulator import RelayEmulator

__all__ = ["RelayEmulator"]
