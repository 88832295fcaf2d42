"""Declaring what an emulator serves in a namespace's file: queues (with their
forwarding and default time to live, session-enabled or not), event hubs, topics and
their subscriptions."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from gateway.emulator._config import EventHubSpec, QueueSpec
from gateway.emulator._servicebus_config import TopicSpec
from gateway.transports import Store, subscription_path

__all__ = ["declare"]


def declare(store: Store, *, queues: Sequence[QueueSpec], event_hubs: Sequence[EventHubSpec],
            topics: Sequence[TopicSpec], kept: Collection[str] = ()) -> None:
    """Create each entity, or check that it exists with the same settings.

    ``kept``: lower-case paths of entities left as they are, neither created nor checked
    (the administration API created or changed them: what it set holds).

    Raises:
        ConfigError: an entity exists with other settings, or a setting is bad.
    """
    queues = [q for q in queues if q.name.lower() not in kept]
    for q in queues:
        store.create(Store.queue(
            q.name, lock_duration=q.lock_duration, max_delivery_count=q.max_delivery_count,
            max_message_size=q.max_message_size,
            dead_lettering_on_message_expiration=q.dead_lettering_on_message_expiration,
            requires_session=q.requires_session))
        if (q.forward_to, q.default_message_time_to_live, q.duplicate_detection_window) != (
                None, None, None):
            store.topics.set_queue_options(
                q.name, forward_to=q.forward_to,
                default_message_time_to_live=q.default_message_time_to_live,
                duplicate_detection_window=q.duplicate_detection_window)
    for h in event_hubs:
        store.create(Store.partitioned(h.name, partitions=h.partitions,
                                       max_message_size=h.max_message_size))
    for t in topics:
        if t.name.lower() in kept:
            continue
        store.topics.create_topic(t.name, max_message_size=t.max_message_size,
                                  default_message_time_to_live=t.default_message_time_to_live,
                                  duplicate_detection_window=t.duplicate_detection_window)
        for s in t.subscriptions:
            if subscription_path(t.name, s.name).lower() in kept:
                continue
            store.topics.create_subscription(
                t.name, s.name, rules=s.rules, lock_duration=s.lock_duration,
                max_delivery_count=s.max_delivery_count,
                dead_lettering_on_message_expiration=s.dead_lettering_on_message_expiration,
                default_message_time_to_live=s.default_message_time_to_live,
                forward_to=s.forward_to, requires_session=s.requires_session)
