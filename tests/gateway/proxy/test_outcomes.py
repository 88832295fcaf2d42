"""The AMQP condition a client gets for each error of the geo sender and receiver."""

from __future__ import annotations

import pytest

from gateway.proxy._outcomes import condition, describe
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


def test_a_secret_in_an_error_never_reaches_the_client() -> None:
    error = MessageRejected("refused: Endpoint=sb://ns/;SharedAccessKeyName=k;"
                            "SharedAccessKey=s3cr3t")
    assert "s3cr3t" not in describe(error)
