"""The AMQP condition a client gets for each error of the geo sender and receiver."""

from __future__ import annotations

import pytest

from gateway.proxy._outcomes import condition
from replication import (
    GatewayError,
    MessageRejected,
    MessageTooLarge,
    NamespaceUnavailable,
    OperationTimeout,
    QueueFull,
)


@pytest.mark.parametrize(("error", "expected"), [
    (MessageTooLarge("too big"), "amqp:link:message-size-exceeded"),
    (MessageRejected("The messaging entity 'x' could not be found"), "amqp:not-found"),
    (MessageRejected("no such queue 'x' in local://primary"), "amqp:not-found"),
    (MessageRejected("Unauthorized access to 'x'"), "amqp:unauthorized-access"),
    (MessageRejected("cannot send to the subscription"), "amqp:not-allowed"),
    (OperationTimeout("no answer", namespace="p"), "com.microsoft:timeout"),
    (NamespaceUnavailable("both down", namespace="p,s"), "com.microsoft:server-busy"),
    (QueueFull("full"), "com.microsoft:server-busy"),
    (GatewayError("else"), "amqp:internal-error"),
])
def test_each_error_gets_the_services_condition(error: GatewayError, expected: str) -> None:
    assert condition(error) == expected
