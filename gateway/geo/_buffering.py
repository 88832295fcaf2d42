"""What the sender checks before it buffers a message: that the namespaces of its
destination would ever take it, and whose messages the destination holds."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gateway.transports.base import Transport
from replication import ANY_NAMESPACE, Message, MessageRejected, parse_destination

__all__ = ["check_size", "owner_of"]


def _namespaces(transports: Mapping[str, Transport], dest: str) -> tuple[list[str], str]:
    namespace, entity = parse_destination(dest)
    return (list(transports) if namespace == ANY_NAMESPACE else [namespace]), entity


def owner_of(transports: Mapping[str, Transport], dest: str) -> str:
    """Whose messages ``dest`` holds, as the durable queue records it: the identities
    (kind and host or file, never a key) of the namespaces it may be sent to, sorted,
    and the entity."""
    names, entity = _namespaces(transports, dest)
    identities = sorted(transports[ns].identity for ns in names)
    return f"{' + '.join(identities)} entity {entity}"


def check_size(transports: Mapping[str, Transport], dest: str, batch: Sequence[Message]) -> None:
    """Refuse a message larger than the smallest limit among the namespaces ``dest``
    may be replayed to: buffered, it could only be dead-lettered at replay.

    Raises:
        MessageRejected: a message of ``batch`` is too large; nothing was buffered.
    """
    names, _ = _namespaces(transports, dest)
    limits = [limit for ns in names if (limit := transports[ns].max_message_size) is not None]
    if not limits:
        return
    limit = min(limits)
    for message in batch:
        if message.size > limit:
            raise MessageRejected(
                f"message {message.message_id!r} is {message.size} bytes, over the "
                f"{limit}-byte limit of {' and '.join(names)}; it was not sent or "
                f"buffered: make it smaller"
            )
