"""Every ```python snippet of README.md and docs/ runs (see tests/docs/snippets.py for
the markers that say how), against the embedded namespaces, the emulators or a real
PostgreSQL server; only snippets that need Azure credentials are left out."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.docs.snippets import ROOT, Snippet, documents, snippets
from tests.postgres import Pg

#: At most this many snippets may be left out (they need Azure credentials): few.
MAX_LEFT_OUT = 4


def run_document(path: Path, tmp_path: Path,
                 env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    todo = [vars(s) | {"where": s.where} for s in snippets(path) if s.skip is None]
    (tmp_path / "snippets.json").write_text(json.dumps(todo))
    return subprocess.run(
        [sys.executable, str(Path(__file__).with_name("snippet_child.py")),
         str(tmp_path / "snippets.json"), str(tmp_path)],
        capture_output=True, text=True, timeout=240, check=False, stdin=subprocess.DEVNULL,
        env={**os.environ, **env, "PYTHONPATH": str(ROOT)})


def new_database(pg: Pg) -> str:
    """A database of its own in the test server; its DSN."""
    import psycopg

    name = f"snippets_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    base, _, _ = pg.dsn.rpartition("/")
    return f"{base}/{name}"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("document", [str(p.relative_to(ROOT)) for p in documents()])
def test_the_snippets_run(document: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    # Given a document's snippets, and a database when one of them needs it
    found = snippets(ROOT / document)
    env = {}
    if any("postgres" in s.fixtures for s in found):
        env["DATABASE_URL"] = new_database(request.getfixturevalue("pg"))
    # When they run in order
    done = run_document(ROOT / document, tmp_path, env)
    # Then each ran
    assert done.returncode == 0, done.stdout + done.stderr
    ran = [line.split()[1] for line in done.stdout.splitlines() if line.startswith("ran ")]
    assert ran == [s.where for s in found if s.skip is None], done.stdout


def test_few_snippets_are_left_out_and_each_says_why() -> None:
    left_out = [s for page in documents() for s in snippets(page) if s.skip]
    assert all(s.skip.startswith("needs Azure credentials") for s in left_out), left_out
    assert len([s for s in left_out if s.path != "README.md"]) <= MAX_LEFT_OUT


def test_a_failing_snippet_fails_its_document(tmp_path: Path) -> None:
    # Given a page whose second snippet uses a name nothing defines
    page = ROOT / "docs" / f"_probe_{uuid.uuid4().hex[:8]}.md"
    page.write_text("```python\nx = 1\n```\n\n```python\nprint(x + undefined_name)\n```\n")
    try:
        done = run_document(page, tmp_path, {})
    finally:
        page.unlink()
    # Then the run fails, naming that snippet
    assert done.returncode == 1
    assert f"FAILED docs/{page.name}:5" in done.stdout
    assert "NameError" in done.stderr


def test_a_marker_without_a_reason_is_refused(tmp_path: Path) -> None:
    page = ROOT / "docs" / f"_probe_{uuid.uuid4().hex[:8]}.md"
    page.write_text("<!-- no-run: -->\n```python\npass\n```\n")
    try:
        with pytest.raises(ValueError, match="needs a reason"):
            snippets(page)
    finally:
        page.unlink()


def test_the_extractor_reads_markers() -> None:
    found = snippets(ROOT / "docs" / "getting-started.md")
    assert any(s.fixtures == ["emulator"] for s in found)
    assert isinstance(found[0], Snippet) and found[0].skip is None
