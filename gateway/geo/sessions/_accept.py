"""Locking one session in both namespaces (``AsyncGeoSessionReceiver.accept_session``).

The session is asked of both namespaces at once: a named one, or the next available
one in each. The first namespace (the primary) decides which session when both
offer one; the other gives its own back and locks that one by name. A namespace that
is down or hangs is left to the receiver's pump, which locks the session there once
it answers; so is one where another receiver holds the session, except that a
receiver holding the session only in the secondary while another holds it in the
primary gives it up: the primary's holder has it, and two receivers never hand one
session over side by side for longer than that look takes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from typing import Any

import anyio

from gateway.geo.sessions._links import accept_in
from gateway.transports.base import SessionReceiver, Transport
from replication import (
    DeadlineEstimator,
    GatewayError,
    MessageRejected,
    NamespaceUnavailable,
    TransportError,
)

__all__ = ["Accepted", "accept_both"]

logger = logging.getLogger("geogateway")


@dataclass
class Accepted:
    """A session locked in one namespace at least: the locks, by namespace, and the
    namespaces that could not lock it now (down, or held by another receiver)."""

    session_id: str
    held: dict[str, SessionReceiver] = field(default_factory=dict)
    down: dict[str, GatewayError] = field(default_factory=dict)
    busy: set[str] = field(default_factory=set)


async def _one(transport: Transport, entity: str, session_id: str | None, max_wait: float,
               estimator: DeadlineEstimator) -> SessionReceiver | GatewayError | None:
    try:
        return await accept_in(transport, entity, session_id, max_wait=max_wait,
                               estimator=estimator)
    except (TransportError, MessageRejected) as exc:
        return exc


async def _give_back(receiver: SessionReceiver) -> None:
    with contextlib.suppress(GatewayError), anyio.move_on_after(2.0):
        await receiver.aclose()


async def _first_offers(transports: list[Transport], entity: str, wanted: str | None,
                        max_wait: float, estimator: DeadlineEstimator,
                        background: set[asyncio.Task[Any]]
                        ) -> list[SessionReceiver | GatewayError | None]:
    """Ask every namespace at once; once one offers a session, stop waiting for the
    others (their asks are cancelled in the ``background``: a lock one took meanwhile
    is given back) and report them as ``None``."""
    tasks = [asyncio.ensure_future(_one(t, entity, wanted, max_wait, estimator))
             for t in transports]
    pending = set(tasks)
    while pending:
        _, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        if any(isinstance(t.result(), SessionReceiver) for t in tasks if t.done()):
            break
    for task in pending:
        task.cancel()
        background.add(task)
        task.add_done_callback(background.discard)
    return [t.result() if t.done() and not t.cancelled() else None for t in tasks]


async def accept_both(transports: list[Transport], entity: str, wanted: str | None, *,
                      max_wait: float, estimator: DeadlineEstimator,
                      background: set[asyncio.Task[Any]]) -> Accepted | None:
    """Lock ``wanted`` (``None``: the next available session) in the namespaces.

    ``background`` collects the asks given up on (the caller awaits them on close).

    Returns:
        The session and its locks; ``None`` when no namespace has it (or any) free.

    Raises:
        NamespaceUnavailable: every namespace is down or did not answer.
        MessageRejected: every namespace refused the entity (no such queue, not
            session-enabled).
    """
    results = await _first_offers(transports, entity, wanted, max_wait, estimator,
                                  background)
    errors = [r for r in results if isinstance(r, GatewayError)]
    if len(errors) == len(transports):
        if all(isinstance(e, MessageRejected) for e in errors):
            raise errors[0]
        names = ",".join(t.namespace for t in transports)
        raise NamespaceUnavailable(f"no namespace answered for a session of {entity!r}: "
                                   + "; ".join(str(e) for e in errors), namespace=names)
    found = [(t, r) for t, r in zip(transports, results, strict=True)
             if isinstance(r, SessionReceiver)]
    if not found:
        return None
    chosen = found[0][1].session_id
    accepted = Accepted(session_id=chosen)
    for t, lock in found:
        if lock.session_id == chosen:
            accepted.held[t.namespace] = lock
        else:
            await _give_back(lock)
    missing = []
    for t, r in zip(transports, results, strict=True):
        if isinstance(r, GatewayError):
            accepted.down[t.namespace] = r
        elif t.namespace not in accepted.held:
            missing.append(t)
    lock_now = await asyncio.gather(*(_one(t, entity, chosen, 0.0, estimator) for t in missing))
    for t, again in zip(missing, lock_now, strict=True):
        if isinstance(again, SessionReceiver):
            accepted.held[t.namespace] = again
        elif isinstance(again, GatewayError):
            accepted.down[t.namespace] = again
        else:
            accepted.busy.add(t.namespace)
    if transports[0].namespace in accepted.busy:
        # Another receiver holds the session in the primary: it is that receiver's.
        logger.info("session %r of %r is held in %s by another receiver: giving it up",
                    chosen, entity, transports[0].namespace)
        for receiver in accepted.held.values():
            await _give_back(receiver)
        return None
    return accepted
