"""Records of one consumer group shared by the checkpoint store tests."""

from __future__ import annotations

from gateway.consumer import ConsumerGroupRef

GROUP = ConsumerGroupRef(
    fully_qualified_namespace="Geo-NS.servicebus.windows.net",
    eventhub_name="Orders",
    consumer_group="$Default",
)
