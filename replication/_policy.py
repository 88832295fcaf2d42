"""Replication configuration: modes, retry bounds and the policy record."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from replication._deadlines import DeadlinePolicy
from replication._errors import ConfigError

__all__ = ["Mode", "ReplicationPolicy", "RetryPolicy"]


class Mode(enum.Enum):
    """How a sender replicates across the two namespaces."""

    #: Send to the active namespace; on a transient failure send to the other and swap roles.
    PASSIVE = "passive"
    #: Send every message to both namespaces with the same ``MessageId``.
    ACTIVE = "active"

    @classmethod
    def parse(cls, value: Mode | str) -> Mode:
        if isinstance(value, Mode):
            return value
        try:
            return cls(str(value).lower())
        except ValueError:
            raise ConfigError(
                f"unknown mode {value!r}: use 'passive' or 'active'"
            ) from None


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """Retries within one namespace before failing over (tenacity builds on these).

    The defaults keep failover under a second: at most ``attempts`` tries, waiting a
    random exponential backoff between ``initial_backoff`` and ``max_backoff``, and
    never longer than ``max_delay`` in all. A sender's send makes its first retry at
    once instead (it reopens a dropped connection: a single blip costs one round trip)
    and backs off before the later ones; a namespace that refuses
    (``NamespaceRefused``) is not retried at all (``retry_in_namespace``).

    Args:
        attempts: tries per namespace and operation, the first included (>= 1).
        initial_backoff: the first backoff's scale in seconds.
        max_backoff: the longest single backoff in seconds.
        max_delay: give up on the namespace after this many seconds in all.
    """

    attempts: int = 3
    initial_backoff: float = 0.05
    max_backoff: float = 0.2
    max_delay: float = 0.75

    def __post_init__(self) -> None:
        if (
            isinstance(self.attempts, bool)
            or not isinstance(self.attempts, int)
            or self.attempts < 1
        ):
            raise ConfigError(f"retry attempts must be a whole number >= 1, not {self.attempts!r}")
        for name in ("initial_backoff", "max_backoff", "max_delay"):
            value = getattr(self, name)
            # ``not value >= 0`` also refuses NaN; bool is an int but not a duration.
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise ConfigError(f"retry {name} must be a number of seconds >= 0, not {value!r}")
        if self.max_backoff < self.initial_backoff:
            raise ConfigError("retry max_backoff must not be less than initial_backoff")


@dataclass(frozen=True, kw_only=True)
class ReplicationPolicy:
    """What a sender does with two namespaces.

    Args:
        mode: passive (fail over) or active (send to both).
        failback: once the preferred primary is healthy again, make it active again.
        retry: retries within one namespace before it counts as failed.
        probe_interval: seconds between health probes of a namespace marked down.
        deadlines: how long one operation on a namespace may take before it counts
            as failed (a passive send is then hedged to the other namespace).
    """

    mode: Mode = Mode.PASSIVE
    failback: bool = False
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    probe_interval: float = 0.25
    deadlines: DeadlinePolicy = field(default_factory=DeadlinePolicy)

    def __post_init__(self) -> None:
        object.__setattr__(self, "mode", Mode.parse(self.mode))
        if not isinstance(self.failback, bool):
            raise ConfigError(f"failback must be true or false, not {self.failback!r}")
        if (
            isinstance(self.probe_interval, bool)
            or not isinstance(self.probe_interval, (int, float))
            or not self.probe_interval > 0
        ):
            raise ConfigError(
                f"probe_interval must be a number of seconds > 0, not {self.probe_interval!r}"
            )
        if not isinstance(self.retry, RetryPolicy):
            raise ConfigError(f"retry must be a RetryPolicy, not {type(self.retry).__name__}")
        if not isinstance(self.deadlines, DeadlinePolicy):
            raise ConfigError(
                f"deadlines must be a DeadlinePolicy, not {type(self.deadlines).__name__}")
