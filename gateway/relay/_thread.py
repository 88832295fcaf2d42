"""``RelayThread``: a relay emulator or listener on its own event loop, for sync code."""

from __future__ import annotations

from gateway._support.service_thread import S, ServiceThread

__all__ = ["RelayThread"]


class RelayThread(ServiceThread[S]):
    """Runs a :class:`RelayEmulator` or a :class:`GeoRelayListener` in a background thread.

    ``with RelayThread(RelayEmulator(...)) as emu:`` starts it on the thread's own
    event loop and returns once it is started; leaving stops it.
    """

    thread_name = "geogateway-relay"
