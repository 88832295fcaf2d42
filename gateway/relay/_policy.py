"""What a relay client does with each outcome: pure decisions, no I/O.

An HTTP request to a hybrid connection ends in one of four :class:`Verdict` values.
:func:`classify_response` and :func:`classify_error` pick it from what the relay
(or the network) gave back; :func:`is_idempotent` says whether a request whose
outcome is unknown may be sent again. The drivers in ``_client.py`` act on them.

The table (``Via`` on a response means a listener answered it; without it the
relay made the response). The relay's own statuses mean what the protocol article's
sender error table says: 502 (it writes 503 there) "the request couldn't be routed
to any listener", 504 "the request was routed to a listener, but the listener didn't
acknowledge receipt in the required time"; a listener that went away after the
request reached it is the second case (the relay emulator answers it so at once):

==============================================  ============  =========================
outcome                                         verdict       the client
==============================================  ============  =========================
any response with ``Via``                       ANSWERED      returns it, whatever status
no ``Via``: 401, 403                            REJECTED      raises MessageRejected
no ``Via``: 404, 502 (not routed: no listener,  UNAVAILABLE   fails over, swaps roles
or it went away before it had the request),
500, 503
no ``Via``: 504 (routed: the listener did not   UNKNOWN       fails over if idempotent,
answer in time, or went away)                                 else OperationTimeout
no ``Via``: any other status (400, 413, ...)    ANSWERED      returns it
DNS failure, refused, TLS failure, connect      UNAVAILABLE   fails over (nothing was sent)
timeout, reset or timeout while sending, pool
timeout
reset, timeout or broken reply after the        UNKNOWN       as 504
request was sent
any other error (bad URL, ...)                  RAISE         raises it as it is
==============================================  ============  =========================

A namespace that accepts the request and answers nothing (a hung front end) is found
by a deadline, :meth:`AnswerTimer.deadline`: when a namespace has not answered within
it, the client hedges an idempotent request (sends it to the other namespace too and
takes the first answer) and probes the namespace for a non-idempotent one (a request
the relay answers itself); no answer to the probe either means the namespace hangs:
``OperationTimeout``, not sent again.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx
from tenacity import RetryCallState, wait_random_exponential

from replication import ConfigError, RetryPolicy

__all__ = [
    "IDEMPOTENT_METHODS",
    "AnswerTimer",
    "RelayClientPolicy",
    "TokenCache",
    "Verdict",
    "classify_error",
    "classify_response",
    "is_idempotent",
    "round_wait",
]

#: Methods that may be sent twice (RFC 9110, 9.2.2): retried when the outcome is unknown.
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS", "TRACE"})


class Verdict(enum.Enum):
    """What one attempt's outcome means for the request."""

    ANSWERED = "answered"  # return the response to the caller
    REJECTED = "rejected"  # the relay refused the token: the other namespace would too
    UNAVAILABLE = "unavailable"  # nothing reached a listener: fail over
    UNKNOWN = "unknown"  # a listener may have acted on it: only idempotent requests go again
    RAISE = "raise"  # not an outage (a bad URL or argument): raise it as it is


_UNAVAILABLE_STATUS = frozenset({404, 500, 502, 503})
_REJECTED_STATUS = frozenset({401, 403})

# httpx errors raised before the request was fully sent: no listener can have seen it.
_BEFORE_SEND: tuple[type[httpx.TransportError], ...] = (
    httpx.ConnectError,  # DNS failure, refused, TLS failure, reset during the handshake
    httpx.ConnectTimeout,
    httpx.WriteError,
    httpx.WriteTimeout,
    httpx.PoolTimeout,
)
# ... and after it was sent: the listener may have acted on it.
_AFTER_SEND: tuple[type[httpx.TransportError], ...] = (
    httpx.ReadError,
    httpx.ReadTimeout,
    httpx.RemoteProtocolError,
)


def classify_response(status_code: int, *, via: bool) -> Verdict:
    """The verdict on a response with ``status_code``; ``via``: it has a ``Via`` header."""
    if via:
        return Verdict.ANSWERED
    if status_code in _REJECTED_STATUS:
        return Verdict.REJECTED
    if status_code in _UNAVAILABLE_STATUS:
        return Verdict.UNAVAILABLE
    if status_code == 504:
        return Verdict.UNKNOWN
    return Verdict.ANSWERED


def classify_error(exc: BaseException) -> Verdict:
    """The verdict on an exception raised while sending one request."""
    if isinstance(exc, httpx.UnsupportedProtocol):
        return Verdict.RAISE  # a bad URL fails the same way on the other namespace
    if isinstance(exc, _BEFORE_SEND):
        return Verdict.UNAVAILABLE
    if isinstance(exc, _AFTER_SEND):
        return Verdict.UNKNOWN
    if isinstance(exc, httpx.TransportError):
        # Proxy and protocol errors we cannot place: the relay did not answer, and
        # nothing says the request was not delivered.
        return Verdict.UNKNOWN
    return Verdict.RAISE


def is_idempotent(method: str, idempotent: bool | None = None) -> bool:
    """Whether a request may be sent again when its outcome is unknown.

    Args:
        method: the HTTP method.
        idempotent: the caller's word; ``None`` decides by ``method``.
    """
    if idempotent is not None:
        return idempotent
    return method.upper() in IDEMPOTENT_METHODS


def _seconds(name: str, value: object, *, positive: bool = True) -> None:
    ok = (isinstance(value, (int, float)) and not isinstance(value, bool)
          and (value > 0 if positive else value >= 0))
    if not ok:
        raise ConfigError(f"relay client {name} must be a number of seconds "
                          f"{'> 0' if positive else '>= 0'}, not {value!r}")


@dataclass(frozen=True, kw_only=True)
class RelayClientPolicy:
    """Timeouts, retries and tokens of a relay client.

    The defaults keep failover under a second: a namespace that refuses or resets
    is left at once, one that does not answer the TCP/TLS handshake after
    ``connect_timeout``, one that takes a request and answers nothing after
    ``answer_deadline`` (hedged: an idempotent request is answered by the other
    namespace) or ``answer_deadline + probe_timeout`` (``OperationTimeout`` for a
    non-idempotent one); the retry policy bounds the whole request (both
    namespaces, ``retry.attempts`` rounds, ``retry.max_delay`` seconds of backoff).

    Args:
        connect_timeout: seconds to open a connection to a namespace.
        read_timeout: seconds to wait for the answer; the relay itself answers 504
            after 60 s, so the default waits a little longer.
        write_timeout: seconds to send the request.
        answer_deadline: seconds to wait for a namespace's answer before suspecting
            that it hangs: an idempotent request is then hedged to the other
            namespace, the namespace of a non-idempotent one probed. The deadline
            grows with what the namespace normally takes (:class:`AnswerTimer`),
            never past ``read_timeout``.
        probe_timeout: seconds a suspected namespace has to answer the probe (a
            request the relay answers itself, which no listener sees); longer than the
            deadline, so that a busy client or relay is not taken for a hung one (the
            request would end in an ``OperationTimeout`` it did not need).
        retry: rounds over both namespaces and the backoff between rounds.
        token_ttl: lifetime of each SAS token, in seconds.
        token_renew_before: renew a cached token this long before it expires.
    """

    connect_timeout: float = 0.5
    read_timeout: float = 65.0
    write_timeout: float = 10.0
    answer_deadline: float = 0.5
    probe_timeout: float = 1.0
    retry: RetryPolicy = field(default_factory=lambda: RetryPolicy(attempts=2))
    token_ttl: float = 3600.0
    token_renew_before: float = 300.0

    def __post_init__(self) -> None:
        for name in ("connect_timeout", "read_timeout", "write_timeout", "answer_deadline",
                     "probe_timeout", "token_ttl"):
            _seconds(name, getattr(self, name))
        _seconds("token_renew_before", self.token_renew_before, positive=False)
        if self.token_renew_before >= self.token_ttl:
            raise ConfigError("relay client token_renew_before must be less than token_ttl")
        if self.answer_deadline >= self.read_timeout:
            raise ConfigError("relay client answer_deadline must be less than read_timeout")
        if not isinstance(self.retry, RetryPolicy):
            raise ConfigError("relay client retry must be a RetryPolicy")

    @property
    def timeout(self) -> httpx.Timeout:
        """The httpx timeouts (the pool wait counts as connecting)."""
        return httpx.Timeout(connect=self.connect_timeout, read=self.read_timeout,
                             write=self.write_timeout, pool=self.connect_timeout)


@dataclass
class AnswerTimer:
    """How long one namespace normally takes to answer, and so how long to wait for it.

    The estimator is TCP's retransmission timer (RFC 6298): a smoothed answer time
    and its mean deviation, updated with every answer a listener gave; the deadline
    is their sum with four deviations, kept between a floor and a ceiling. A
    namespace that answers in milliseconds gets the floor; one whose service
    normally takes seconds gets a deadline its answers fit in, so its slow answers
    are not taken for a hang.
    """

    smoothed: float | None = None
    deviation: float = 0.0

    def observe(self, seconds: float) -> None:
        """Take one answer's time (from sending the request to its response's head)."""
        if self.smoothed is None:
            self.smoothed, self.deviation = seconds, seconds / 2
            return
        self.deviation = 0.75 * self.deviation + 0.25 * abs(self.smoothed - seconds)
        self.smoothed = 0.875 * self.smoothed + 0.125 * seconds

    def deadline(self, floor: float, ceiling: float) -> float:
        """Seconds to wait for this namespace's answer before suspecting it hangs."""
        if self.smoothed is None:
            return floor
        return min(ceiling, max(floor, self.smoothed + 4 * self.deviation))


@dataclass
class TokenCache:
    """One namespace's SAS token, made again shortly before it expires.

    ``make(now)`` returns a token valid for ``ttl`` seconds from ``now``.
    """

    ttl: float
    renew_before: float
    _token: str = field(default="", repr=False)
    _expires: float = 0.0

    def get(self, now: float, make: Callable[[float], str]) -> str:
        """The cached token, or a fresh one when less than ``renew_before`` is left."""
        if not self._token or self._expires - now <= self.renew_before:
            self._token = make(now)
            self._expires = now + self.ttl
        return self._token


def round_wait(retry: RetryPolicy) -> Callable[[RetryCallState], float]:
    """A tenacity ``wait``: none before the other namespace, a backoff before each new round.

    The drivers send the first attempt themselves (most requests succeed at once)
    and hand the rest to tenacity, so tenacity's attempt ``n`` is the request's
    attempt ``n + 1``: attempts alternate between the two namespaces, and a round
    ends after every second attempt of the request.
    """
    backoff = wait_random_exponential(multiplier=retry.initial_backoff, max=retry.max_backoff)

    def wait(state: RetryCallState) -> float:
        if (state.attempt_number + 1) % 2:
            return 0.0  # the request's attempt that just failed began a round
        rounds = (state.attempt_number + 1) // 2
        return float(backoff(_at_attempt(state, rounds)))

    return wait


def _at_attempt(state: RetryCallState, number: int) -> RetryCallState:
    # wait_random_exponential reads attempt_number only; give it the round's number.
    view = RetryCallState(state.retry_object, state.fn, state.args, state.kwargs)
    view.attempt_number = number
    return view
