"""How a topic's subscription is named: ``TOPIC/Subscriptions/SUB``, as Service Bus
paths name it (the ``Subscriptions`` segment in any case); its dead-letter sub-queue is
``TOPIC/Subscriptions/SUB/$DeadLetterQueue``.
"""

from __future__ import annotations

import re

__all__ = ["SUBSCRIPTIONS", "canonical_entity", "split_subscription", "subscription_path"]

#: The segment between a topic's name and a subscription's, as written canonically.
SUBSCRIPTIONS = "Subscriptions"
_DEAD_LETTER = "/$deadletterqueue"
_PATH = re.compile(r"(?P<topic>.+)/subscriptions/(?P<name>[^/]+)", re.IGNORECASE)


def subscription_path(topic: str, name: str) -> str:
    """The entity path of subscription ``name`` of ``topic``."""
    return f"{topic}/{SUBSCRIPTIONS}/{name}"


def split_subscription(entity: str) -> tuple[str, str] | None:
    """(topic, subscription) of a subscription path (not of its dead-letter queue), or None."""
    m = _PATH.fullmatch(entity)
    return None if m is None else (m["topic"], m["name"])


def canonical_entity(entity: str) -> str:
    """``entity`` with a subscription path's ``Subscriptions`` (and ``$DeadLetterQueue``)
    segment written as the namespace keeps it; any other name unchanged."""
    if "/" not in entity:
        return entity
    base, dead = entity, ""
    if entity.lower().endswith(_DEAD_LETTER):
        base, dead = entity[: -len(_DEAD_LETTER)], "/$DeadLetterQueue"
    parts = split_subscription(base)
    if parts is None:
        return entity
    return subscription_path(*parts) + dead
