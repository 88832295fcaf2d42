"""Role state: which of the two namespaces is active, as a pure record."""

from __future__ import annotations

from dataclasses import dataclass, replace

from replication._errors import ConfigError

__all__ = ["RoleState"]


@dataclass(frozen=True, kw_only=True)
class RoleState:
    """Which namespace takes sends now, and which one is preferred.

    ``preferred`` is the configured primary; ``active`` moves on failover.
    ``generation`` counts role changes so that a persisted state can be compared.
    """

    preferred: str
    standby_preferred: str
    active: str
    generation: int = 0
    changed_at: float = 0.0

    def __post_init__(self) -> None:
        if self.preferred == self.standby_preferred:
            raise ConfigError("primary and secondary must be two different namespaces")
        if self.active not in (self.preferred, self.standby_preferred):
            raise ConfigError(
                f"active namespace {self.active!r} is neither {self.preferred!r} "
                f"nor {self.standby_preferred!r}"
            )

    @classmethod
    def initial(cls, primary: str, secondary: str) -> RoleState:
        return cls(preferred=primary, standby_preferred=secondary, active=primary)

    @property
    def standby(self) -> str:
        """The namespace that is not active."""
        return self.standby_preferred if self.active == self.preferred else self.preferred

    @property
    def order(self) -> tuple[str, str]:
        """Namespaces in the order a passive send tries them."""
        return (self.active, self.standby)

    @property
    def failed_over(self) -> bool:
        return self.active != self.preferred

    def swap(self, now: float) -> RoleState:
        """The state after a failover: the standby becomes active."""
        return replace(
            self, active=self.standby, generation=self.generation + 1, changed_at=now
        )

    def fail_back(self, now: float) -> RoleState:
        """The state with the preferred primary active again (unchanged if it is)."""
        if not self.failed_over:
            return self
        return self.swap(now)
