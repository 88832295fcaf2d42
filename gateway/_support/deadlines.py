"""One operation on a namespace (or a store) within its adaptive deadline.

The deadline comes from a :class:`replication.DeadlineEstimator`; the latency of each
call that answers in time goes back to it, so the deadline follows what the
namespace normally takes. A call with no answer in time is cancelled and raises
``OperationTimeout``: used where the caller must move on (a settlement, a partition
read, a checkpoint), never for a send, whose attempt must go on (see the sender).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

from replication import DeadlineEstimator, Operation, OperationTimeout

__all__ = ["within_deadline"]

T = TypeVar("T")


async def within_deadline(
    estimator: DeadlineEstimator,
    namespace: str,
    operation: Operation,
    call: Callable[[], Awaitable[T]],
    *,
    what: str,
    wait: float = 0.0,
    key: str | None = None,
) -> T:
    """Await ``call()`` for at most ``wait`` plus the deadline of ``operation``.

    Args:
        estimator: the deadlines, and where the latency goes.
        namespace: who is called (named in the error).
        operation: the kind of call.
        call: makes the awaitable.
        what: the call, for the error (``"complete 'm1'"``).
        wait: seconds the call may wait by design (a receive's ``max_wait``); only
            the latency beyond it is the namespace's.
        key: the estimator's key, if not ``namespace`` (a checkpoint store).

    Raises:
        OperationTimeout: no answer in time; the call was cancelled, its outcome is
            unknown.
    """
    key = namespace if key is None else key
    seconds = wait + estimator.deadline(key, operation)
    began = estimator.clock()
    with anyio.move_on_after(seconds):
        result = await call()
        estimator.observe(key, operation, estimator.clock() - began - wait)
        return result
    raise OperationTimeout(
        f"{what} on {namespace!r} got no answer within its deadline of {seconds:.3g} s "
        "(the namespace is not answering); the outcome is unknown", namespace=namespace)
