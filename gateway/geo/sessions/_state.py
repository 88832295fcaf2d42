"""What a geo session receiver keeps in each namespace's session state.

The same session exists in both namespaces, each with its own state, and one of them
may miss a write while it is down. So the state is written as a small JSON envelope
that says which write is the newest, and how far the session was handed over::

    {"geogateway-session": 1, "version": 7, "next": 120, "state": "<base64>"}

``version`` counts the writes (the receiver reads both namespaces' envelopes and takes
the higher one), ``next`` is the first position not handed over yet (a receiver that
takes the session over starts there), ``state`` the application's bytes (``null``
when it has none). A state that is not such an envelope (written by another client)
is the application's bytes, version 0.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["SessionState", "newest"]

_KEY = "geogateway-session"


@dataclass(frozen=True, kw_only=True)
class SessionState:
    """One namespace's session state, read through the envelope."""

    state: bytes | None = None
    version: int = 0
    next_position: int | None = None

    def encode(self) -> bytes:
        body = {_KEY: 1, "version": self.version, "next": self.next_position,
                "state": None if self.state is None else base64.b64encode(self.state).decode()}
        return json.dumps(body, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes | None) -> SessionState:
        """The envelope in ``raw``; foreign bytes are the application's state."""
        if raw is None:
            return cls()
        try:
            body = json.loads(raw)
            if not isinstance(body, dict) or body.get(_KEY) != 1:
                raise ValueError("not an envelope")
            state = body.get("state")
            version, nxt = body.get("version"), body.get("next")
            return cls(state=None if state is None else base64.b64decode(state, validate=True),
                       version=version if isinstance(version, int) else 0,
                       next_position=nxt if isinstance(nxt, int) and nxt >= 0 else None)
        except (ValueError, TypeError, binascii.Error):
            return cls(state=bytes(raw))


def newest(states: Iterable[SessionState]) -> SessionState:
    """The state of the latest write, with the furthest position any of them knows."""
    found = list(states)
    if not found:
        return SessionState()
    best = max(found, key=lambda s: s.version)
    furthest = max((s.next_position for s in found if s.next_position is not None),
                   default=None)
    return SessionState(state=best.state, version=best.version, next_position=furthest)
