"""The error tree: hierarchy and pickling of transport errors with their namespace."""

from __future__ import annotations

import copy
import pickle

import pytest

from replication import (
    ConfigError,
    DurableQueueError,
    GatewayError,
    MessageRejected,
    NamespaceUnavailable,
    OperationTimeout,
    OwnershipLost,
    QueueCorrupt,
    QueueFull,
    TransportError,
)


class DrillTimeout(OperationTimeout):
    """A subclass defined outside the library (module level so pickle finds it)."""


TRANSPORT_ERRORS = [TransportError, NamespaceUnavailable, OperationTimeout, DrillTimeout]


@pytest.mark.parametrize(
    ("cls", "parent"),
    [
        (TransportError, GatewayError),
        (NamespaceUnavailable, TransportError),
        (OperationTimeout, TransportError),
        (MessageRejected, GatewayError),
        (DurableQueueError, GatewayError),
        (QueueFull, DurableQueueError),
        (QueueCorrupt, DurableQueueError),
        (OwnershipLost, GatewayError),
        (ConfigError, GatewayError),
        (GatewayError, Exception),
    ],
)
def test_the_error_tree(cls, parent):
    assert issubclass(cls, parent)


def test_message_rejected_is_not_transient():
    # A permanent refusal must never be caught as a transient transport error.
    assert not issubclass(MessageRejected, TransportError)


def test_transport_errors_need_a_namespace():
    with pytest.raises(TypeError):
        NamespaceUnavailable("down")  # type: ignore[call-arg]


@pytest.mark.parametrize("cls", TRANSPORT_ERRORS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_transport_errors_keep_type_message_and_namespace_through_pickle(cls, protocol):
    # Given a transport error for one namespace
    error = cls("send timed out after 0.75s", namespace="west")
    # When it is pickled and loaded (as when it crosses a process boundary)
    loaded = pickle.loads(pickle.dumps(error, protocol=protocol))
    # Then it is the same class with the same message and namespace
    assert type(loaded) is cls
    assert str(loaded) == "send timed out after 0.75s"
    assert loaded.namespace == "west"
    assert loaded.args == ("send timed out after 0.75s",)
    assert isinstance(loaded, TransportError)


@pytest.mark.parametrize("cls", TRANSPORT_ERRORS, ids=lambda c: c.__name__)
def test_transport_errors_keep_the_namespace_through_copy(cls):
    error = cls("down", namespace="east")
    for clone in (copy.copy(error), copy.deepcopy(error)):
        assert type(clone) is cls
        assert (str(clone), clone.namespace) == ("down", "east")


@pytest.mark.parametrize(
    "cls", [MessageRejected, QueueFull, QueueCorrupt, OwnershipLost, ConfigError]
)
def test_other_errors_pickle_too(cls):
    loaded = pickle.loads(pickle.dumps(cls("why")))
    assert type(loaded) is cls and str(loaded) == "why"
