"""The Python snippets of the README and the site, and what runs them.

A snippet is a fenced ```python block. The HTML comment on the line just before it (not
shown on GitHub or the site) may say how to run it:

- ``<!-- no-run: REASON -->``: it is not run (the reason is required; only snippets
  that need Azure credentials are left out);
- ``<!-- run-with: NAME[, NAME] -->``: it needs a fixture: ``emulator`` (two emulated
  namespaces with a queue ``orders``: ``PRIMARY_CONNECTION_STRING`` and
  ``SECONDARY_CONNECTION_STRING``; ``PRIMARY_CERTIFICATE``, the administration API's),
  ``relay`` (the relay emulator with a hybrid
  connection ``orders`` and an echo listener on it: ``WEST_CONN`` and ``NORTH_CONN``),
  ``postgres`` (a database of its own in a real PostgreSQL server, in
  ``$DATABASE_URL``, with a table ``orders``), ``config`` (a ``geogateway.toml`` on
  the local namespaces).

The snippets of one file run in order in one process and share their names, as a
reader reads them; each runs in a new working directory with new local namespaces
(``$GEOGATEWAY_DATA_DIR``) and state. A snippet with top-level ``await`` runs on an
event loop of its own (``asyncio.run``). ``$METRICS_PORT`` is a free port.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
MARK = re.compile(r"^<!-- (no-run|run-with): *(.*?) *-->$")
FIXTURES = ("emulator", "relay", "postgres", "config")


@dataclass
class Snippet:
    """One ```python block: where it is, its code and how to run it."""

    path: str
    line: int
    code: str
    skip: str | None = None
    fixtures: list[str] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def snippets(path: Path) -> list[Snippet]:
    """The snippets of one Markdown file, in order.

    Raises:
        ValueError: a marker without its reason, or naming a fixture that does not exist.
    """
    text = path.read_text(encoding="utf-8")
    found = []
    for block in BLOCK.finditer(text):
        line = text.count("\n", 0, block.start()) + 1
        before = text[:block.start()].rstrip("\n").rsplit("\n", 1)[-1]
        snippet = Snippet(str(path.relative_to(ROOT)), line, block.group(1))
        mark = MARK.match(before)
        if mark and mark.group(1) == "no-run":
            if not mark.group(2):
                raise ValueError(f"{snippet.where}: no-run needs a reason")
            snippet.skip = mark.group(2)
        elif mark:
            snippet.fixtures = [name.strip() for name in mark.group(2).split(",")]
            unknown = set(snippet.fixtures) - set(FIXTURES)
            if unknown:
                raise ValueError(f"{snippet.where}: unknown fixture {sorted(unknown)}")
        found.append(snippet)
    return found


def documents() -> list[Path]:
    """README.md and every page of the site that has a snippet."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return [page for page in pages if BLOCK.search(page.read_text(encoding="utf-8"))]
