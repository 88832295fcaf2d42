"""The README's commands are the ones CI runs, and the docs' samples are what they print.

``.ci/run`` must contain, as one of its lines, exactly the command in the README's
```sh block under "## Running the tests"; the Quick start's first block runs the drill,
which is the command of Getting started's first drill (docs/getting-started.md), and the
sample report there is what that command prints (its varying figures as ranges); the
outbox guide's snippets define every name they use.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^```sh[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


#: The page of the site that shows the first drill and its sample report.
GETTING_STARTED = "docs/getting-started.md"


def section(heading: str, doc: str = "README.md") -> str:
    """The text of ``doc`` under ``heading``, up to the next heading of the same level."""
    text = (ROOT / doc).read_text(encoding="utf-8")
    match = re.search(rf"^{re.escape(heading)}[ \t]*$(.*?)(?=^## |\Z)", text,
                      re.MULTILINE | re.DOTALL)
    assert match, f"{doc} has no {heading!r} section"
    return match.group(1)


def first_sh_command(heading: str, doc: str = "README.md") -> str:
    """The one command line of the first ```sh block under ``heading``."""
    block = FENCE.search(section(heading, doc))
    assert block, f"no ```sh block under {heading!r} in {doc}"
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


def test_getting_started_shows_the_quick_starts_drill() -> None:
    *_, command = first_sh_command("## Quick start").split("&&")
    assert first_sh_command("## The first drill", GETTING_STARTED) == command.strip()


#: A source path (``gateway/geo/sender/_sender.py``) or dotted module name
#: (``gateway.geo.sender._sender``, maybe followed by an attribute) of the project, as the
#: docs name them. (``durable_queue.path``
#: is a configuration key: a dotted name out of ``gateway`` must name a private module.)
SOURCE_PATH = re.compile(r"(?<![\w/])((?:gateway|replication|durable_queue)(?:/[A-Za-z_]+)*\.py)\b")
DOTTED = re.compile(
    r"(?<![\w./])(gateway(?:\.[A-Za-z_]+)+|(?:replication|durable_queue)\._[A-Za-z_.]+)")


def named_in_docs() -> list[tuple[str, str]]:
    found = []
    docs = sorted(str(page.relative_to(ROOT)) for page in (ROOT / "docs").rglob("*.md"))
    for doc in ("README.md", "benchmarks/README.md", *docs):
        text = (ROOT / doc).read_text(encoding="utf-8")
        found += [(doc, m) for m in SOURCE_PATH.findall(text)]
        found += [(doc, m) for m in DOTTED.findall(text)]
    return found


def _exists(name: str) -> bool:
    if name.endswith(".py"):
        return (ROOT / name).is_file()
    # The longest prefix that is a module or package; what follows must be attributes.
    parts = name.split(".")
    for k in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:k])
        source = base.with_suffix(".py") if not base.is_dir() else base / "__init__.py"
        if source.is_file():
            text = source.read_text(encoding="utf-8")
            return all(re.search(rf"\b{re.escape(attr)}\b", text) for attr in parts[k:k + 1])
    return False


def test_every_module_the_docs_name_exists() -> None:
    named = named_in_docs()
    assert len(named) > 10  # the check reads the docs at all
    missing = sorted({f"{doc}: {name}" for doc, name in named if not _exists(name)})
    assert missing == [], "the docs name modules that are gone:\n" + "\n".join(missing)


# -- the quick start's sample report ----------------------------------------------------

#: A table row as rich prints it: ``│ label │ value │``.
ROW = re.compile(r"^│ (.*?) +│ (.*?) +│$")
#: A figure that varies from run to run, written in the sample as the range runs printed
#: (``10-200``, ``14-50 s``): the run must print one number of that unit there.
RANGE = re.compile(r"\d+(?:\.\d+)?-\d+(?:\.\d+)?(?P<unit>(?: [a-z]+)?)")
#: A fenced block: its language (empty for a sample of output) and its text.
BLOCK = re.compile(r"^```(\w*)[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


def split_table(text: str) -> tuple[list[str], list[tuple[str, str]]]:
    """The lines of a printed table that are not rows (title, borders, header), and
    its rows as (label, value)."""
    frame, rows = [], []
    for line in text.strip("\n").splitlines():
        row = ROW.match(line.rstrip())
        if row:
            rows.append((row.group(1), row.group(2)))
        else:
            frame.append(line.rstrip())
    return frame, rows


def matches(sample: str, printed: str) -> bool:
    """A sample's value is what the run printed, or a range of its unit."""
    varying = RANGE.fullmatch(sample)
    if varying is None:
        return sample == printed
    return re.fullmatch(rf"\d+(?:\.\d+)?{re.escape(varying.group('unit'))}", printed) is not None


def test_the_sample_check_can_tell_a_wrong_sample() -> None:
    assert matches("14-50 s", "23.731 s") and matches("10-200", "13") and matches("0", "0")
    assert not matches("14-50 s", "13") and not matches("0", "13")
    assert not matches("4.400 s", "23.731 s")


@pytest.mark.timeout(600)
def test_the_quick_start_sample_is_what_the_drill_prints(tmp_path: Path) -> None:
    # Given the quick start's drill command (its last step) and the sample report of the
    # first drill in Getting started
    text = section("## The first drill", GETTING_STARTED)
    *_, command = first_sh_command("## Quick start").split("&&")
    program, *args = command.split()
    assert program == ".venv/bin/geogateway", command
    samples = [body for language, body in BLOCK.findall(text) if not language]
    assert samples, f"no sample output block under the first drill in {GETTING_STARTED}"
    sample_frame, sample_rows = split_table(samples[0])
    # When that command runs (the geogateway of this environment)
    script = Path(sys.executable).with_name("geogateway")
    launcher = [str(script)] if script.exists() else [sys.executable, "-m", "gateway.cli"]
    proc = subprocess.run(
        [*launcher, *args], capture_output=True, text=True, timeout=540, cwd=tmp_path,
        stdin=subprocess.DEVNULL, env={**os.environ, "TMPDIR": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    frame, rows = split_table(proc.stdout)
    # Then the sample has its title, borders and header, and its rows in their order,
    # each value what the run printed or a range the printed figure is a number of
    assert sample_frame == frame, proc.stdout
    assert [label for label, _ in sample_rows] == [label for label, _ in rows], proc.stdout
    wrong = [(label, want, got) for (label, want), (_, got) in zip(sample_rows, rows, strict=True)
             if not matches(want, got)]
    assert wrong == [], f"the sample vs the run (label, sample, printed): {wrong}"
    assert any(RANGE.fullmatch(value) for _, value in sample_rows)  # it has varying figures


# -- the outbox's snippets ----------------------------------------------------------------

PYTHON = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


def test_the_outbox_snippets_define_every_name_they_use(tmp_path: Path) -> None:
    # Given the outbox guide's Python snippets, read in order as one program
    code = "\n".join(PYTHON.findall((ROOT / "docs" / "guides" / "outbox.md")
                                     .read_text(encoding="utf-8")))
    assert "PostgresOutbox" in code
    program = tmp_path / "outbox_snippets.py"
    program.write_text(code)
    # Then ruff finds no undefined name in them
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--isolated", "--select", "F821",
         "--output-format", "concise", str(program)],
        capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


# -- the front page's links ---------------------------------------------------------------

LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_the_readmes_links_name_files_that_exist() -> None:
    # (the site's links are checked by its strict build, tests/docs/test_site.py)
    targets = LINK.findall((ROOT / "README.md").read_text(encoding="utf-8"))
    assert len(targets) > 10
    missing = sorted({t for t in targets if "://" not in t and not (ROOT / t).exists()})
    assert missing == [], f"README.md links to files that do not exist: {missing}"
