"""The README's commands are the ones CI runs.

``.ci/run`` must contain, as one of its lines, exactly the command in the README's
```sh block under "## Running the tests"; the Quick start's first block runs the drill.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^```sh[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


def section(heading: str) -> str:
    """The README text under ``heading``, up to the next heading of the same level."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(rf"^{re.escape(heading)}[ \t]*$(.*?)(?=^## |\Z)", text,
                      re.MULTILINE | re.DOTALL)
    assert match, f"README.md has no {heading!r} section"
    return match.group(1)


def first_sh_command(heading: str) -> str:
    """The one command line of the first ```sh block under ``heading``."""
    block = FENCE.search(section(heading))
    assert block, f"no ```sh block under {heading!r} in README.md"
    lines = [line.strip() for line in block.group(1).splitlines()
             if line.strip() and not line.strip().startswith("#")]
    assert len(lines) == 1, f"the ```sh block under {heading!r} should be one command: {lines}"
    return lines[0]


def test_ci_runs_the_readme_test_command() -> None:
    command = first_sh_command("## Running the tests")
    ci_lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert command in ci_lines, (
        f".ci/run must contain the README's test command exactly:\n{command}"
    )


def test_quick_start_runs_the_drill() -> None:
    assert "geogateway drill" in first_sh_command("## Quick start")
