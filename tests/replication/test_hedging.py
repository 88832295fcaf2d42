"""next_hedge_step: when a send goes to the other namespace, and when it is over; SendProgress:
when an attempt queued behind others is due (pure)."""

from __future__ import annotations

from replication import Attempt, AttemptState, HedgeStep, Mode, SendProgress, next_hedge_step

RUNNING, OK, FAILED = AttemptState.RUNNING, AttemptState.SUCCEEDED, AttemptState.FAILED
ORDER = ("primary", "secondary")


def passive(now: float, **attempts: Attempt) -> HedgeStep:
    return next_hedge_step(ORDER, attempts, now=now, mode=Mode.PASSIVE)


def active(now: float, **attempts: Attempt) -> HedgeStep:
    return next_hedge_step(ORDER, attempts, now=now, mode=Mode.ACTIVE)


def attempt(namespace: str, due: float, state: AttemptState = RUNNING) -> Attempt:
    return Attempt(namespace, due=due, state=state)


# -- passive ------------------------------------------------------------------------


def test_passive_starts_with_the_active_namespace_only() -> None:
    assert passive(0.0) == HedgeStep(launch=("primary",))


def test_passive_waits_for_the_active_namespace_until_its_deadline() -> None:
    step = passive(0.1, primary=attempt("primary", due=0.3))
    assert step == HedgeStep(wake_at=0.3)


def test_passive_hedges_to_the_other_namespace_once_the_deadline_passed() -> None:
    # Given the primary has not answered by its deadline
    step = passive(0.3, primary=attempt("primary", due=0.3))
    # Then the same batch goes to the secondary, as a hedge (the first attempt goes on)
    assert step == HedgeStep(launch=("secondary",), hedge=True)


def test_passive_fails_over_at_once_when_the_active_namespace_fails() -> None:
    step = passive(0.01, primary=attempt("primary", due=0.3, state=FAILED))
    assert step == HedgeStep(launch=("secondary",), hedge=False)


def test_passive_hedge_that_succeeds_wins_and_names_the_slow_namespace() -> None:
    step = passive(0.35, primary=attempt("primary", due=0.3),
                   secondary=attempt("secondary", due=0.6, state=OK))
    assert step == HedgeStep(done=True, accepted=("secondary",), overdue=("primary",))


def test_passive_first_attempt_that_answers_late_still_wins() -> None:
    # Given the hedge is still running when the primary answers after its deadline
    step = passive(0.4, primary=attempt("primary", due=0.3, state=OK),
                   secondary=attempt("secondary", due=0.6))
    # Then the primary took it; nobody is overdue (the hedge is within its deadline)
    assert step == HedgeStep(done=True, accepted=("primary",), overdue=())


def test_passive_waits_for_the_hedge_while_the_first_attempt_hangs() -> None:
    step = passive(0.4, primary=attempt("primary", due=0.3),
                   secondary=attempt("secondary", due=0.6))
    assert step == HedgeStep(wake_at=0.6)


def test_passive_gives_up_when_every_namespace_is_past_its_deadline() -> None:
    step = passive(0.6, primary=attempt("primary", due=0.3),
                   secondary=attempt("secondary", due=0.6))
    assert step == HedgeStep(done=True, accepted=(), overdue=("primary", "secondary"))


def test_passive_gives_up_when_both_failed() -> None:
    step = passive(0.1, primary=attempt("primary", due=0.3, state=FAILED),
                   secondary=attempt("secondary", due=0.4, state=FAILED))
    assert step == HedgeStep(done=True)


def test_passive_with_one_namespace_left_never_hedges() -> None:
    step = next_hedge_step(("secondary",), {"secondary": attempt("secondary", due=0.3)},
                           now=0.5, mode=Mode.PASSIVE)
    assert step == HedgeStep(done=True, overdue=("secondary",))


# -- active -------------------------------------------------------------------------


def test_active_starts_every_namespace_at_once() -> None:
    assert active(0.0) == HedgeStep(launch=ORDER)


def test_active_waits_for_each_namespace_until_its_own_deadline() -> None:
    # Given the primary took it and the secondary is within its deadline
    step = active(0.1, primary=attempt("primary", due=0.3, state=OK),
                  secondary=attempt("secondary", due=0.35))
    assert step == HedgeStep(wake_at=0.35)


def test_active_is_over_when_the_hung_namespace_passes_its_deadline() -> None:
    step = active(0.35, primary=attempt("primary", due=0.3, state=OK),
                  secondary=attempt("secondary", due=0.35))
    assert step == HedgeStep(done=True, accepted=("primary",), overdue=("secondary",))


def test_active_is_over_once_both_answered() -> None:
    step = active(0.01, primary=attempt("primary", due=0.3, state=OK),
                  secondary=attempt("secondary", due=0.3, state=FAILED))
    assert step == HedgeStep(done=True, accepted=("primary",))


# -- an attempt queued behind others: its deadline counts from their answers -----------


def test_an_attempt_is_due_its_deadline_after_its_launch_when_nothing_answered() -> None:
    progress = SendProgress()
    ticket = progress.ticket()
    assert progress.due("p", ticket=ticket, launched=10.0, deadline=0.5) == 10.5


def test_an_answer_to_an_earlier_attempt_moves_the_deadline_on() -> None:
    # Given two attempts to p, the second queued behind the first
    progress = SendProgress()
    first, second = progress.ticket(), progress.ticket()
    # When the first is answered after the second was launched
    progress.answered("p", ticket=first, at=10.4)
    # Then the second is due its deadline after that answer, the first is not moved
    assert progress.due("p", ticket=second, launched=10.0, deadline=0.5) == 10.9
    assert progress.due("p", ticket=first, launched=10.0, deadline=0.5) == 10.5


def test_answers_to_later_attempts_or_other_namespaces_do_not_move_it() -> None:
    # Given an attempt to p that hangs while later ones (and q) are answered
    progress = SendProgress()
    hung, later = progress.ticket(), progress.ticket()
    progress.answered("p", ticket=later, at=10.4)
    progress.answered("q", ticket=progress.ticket(), at=10.45)
    # Then the hung one is due its deadline after its launch
    assert progress.due("p", ticket=hung, launched=10.0, deadline=0.5) == 10.5


def test_only_recent_answers_are_kept() -> None:
    progress = SendProgress(keep=2)
    tickets = [progress.ticket() for _ in range(4)]
    for i, ticket in enumerate(tickets[:3]):
        progress.answered("p", ticket=ticket, at=11.0 - i)  # the first answered last
    # The first answer (at 11.0) is forgotten: the last two are 10.0 and 9.0
    assert progress.due("p", ticket=tickets[3], launched=5.0, deadline=0.5) == 10.5
