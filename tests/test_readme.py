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


#: A source path (``gateway/geo/sender/_sender.py``) or dotted module name
#: (``gateway.geo.sender._sender``, maybe followed by an attribute) of the project, as the
#: docs name them. (``durable_queue.path``
#: is a configuration key: a dotted name out of ``gateway`` must name a private module.)
SOURCE_PATH = re.compile(r"(?<![\w/])((?:gateway|replication|durable_queue)(?:/[A-Za-z_]+)*\.py)\b")
DOTTED = re.compile(
    r"(?<![\w./])(gateway(?:\.[A-Za-z_]+)+|(?:replication|durable_queue)\._[A-Za-z_.]+)")


def named_in_docs() -> list[tuple[str, str]]:
    found = []
    for doc in ("README.md", "benchmarks/README.md"):
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
