"""The live progress bar of long commands (drills, ``queue replay``, ``send --count``).

A rich progress display on stderr, one bar per phase, made as phases report. It is
off when the command prints JSON for a machine and when stderr is not a terminal
(a pipe, a file, CI): then nothing is drawn and nothing is left behind. It is
transient: once the work is done it disappears and the command's report follows.
"""

from __future__ import annotations

from types import TracebackType

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from gateway.cli._common import err

__all__ = ["LiveProgress"]


class LiveProgress:
    """``with LiveProgress(enabled=not as_json) as bars: bars.update(phase, done, total)``.

    Args:
        enabled: draw at all (``False`` with ``--json``); stderr must be a terminal too.
    """

    def __init__(self, *, enabled: bool = True) -> None:
        self.shown = enabled and err.is_terminal
        self._bar = Progress(
            TextColumn("{task.description:<12}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(), console=err,
            transient=True, disable=not self.shown)
        self._tasks: dict[str, TaskID] = {}

    def __enter__(self) -> LiveProgress:
        self._bar.__enter__()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self._bar.__exit__(kind, error, trace)

    def update(self, phase: str, done: int, total: int | None) -> None:
        """``done`` of ``total`` (``None``: unknown) in ``phase``; a new phase gets a bar."""
        task = self._tasks.get(phase)
        if task is None:
            task = self._tasks[phase] = self._bar.add_task(phase, total=total)
        self._bar.update(task, completed=done, total=total)
