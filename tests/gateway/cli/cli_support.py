"""Helpers shared by the CLI tests: run ``geogateway`` in-process or as a process,
and check its one-line errors.

The fixtures ``dirs`` and ``run`` are made available to every test under tests/gateway
by its conftest.py."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from gateway.cli import main

Result = tuple[int, str, str]
Run = Callable[..., Result]


def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Path]:
    """Temporary data and state directories; no stray GEOGATEWAY_* from the caller."""
    for name in list(os.environ):
        if name.startswith("GEOGATEWAY_"):
            monkeypatch.delenv(name)
    paths = {"data": tmp_path / "data", "state": tmp_path / "state", "tmp": tmp_path}
    monkeypatch.setenv("GEOGATEWAY_DATA_DIR", str(paths["data"]))
    monkeypatch.setenv("GEOGATEWAY_STATE_DIR", str(paths["state"]))
    return paths


@pytest.fixture
def dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """:func:`clean_env` for one test (modules where every test needs it say
    ``pytestmark = pytest.mark.usefixtures("dirs")``)."""
    return clean_env(monkeypatch, tmp_path)


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Run:
    """``run(*args)``: ``geogateway ARGS`` in-process (see :func:`in_process`)."""
    return in_process(capsys, monkeypatch)


def in_process(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Run:
    """``run(*args)`` -> (exit code, stdout, stderr) of ``geogateway ARGS`` in-process."""

    def go(*args: str, stdin: str = "") -> Result:
        # Not a terminal: commands that would ask must refuse instead.
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
        capsys.readouterr()
        code = main(list(args))
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return go


def run_process(*args: str, cwd: Path, timeout: float = 60,
                env: Mapping[str, str] | None = None) -> Result:
    """``python -m gateway.cli ARGS`` in a child process, stdin not a terminal, with
    ``env`` added to this process's environment."""
    proc = subprocess.run(
        [sys.executable, "-m", "gateway.cli", *args],
        capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=timeout, cwd=cwd,
        env={**os.environ, **(env or {}), "PYTHONWARNINGS": "error"},
    )
    return proc.returncode, proc.stdout, proc.stderr


def expect_one_line_error(result: Result, code: int | None = None, *words: str) -> str:
    """Non-zero exit (``code`` when given), one ``error:`` line on stderr, no traceback."""
    exit_code, _, err = result
    assert exit_code != 0, result
    if code is not None:
        assert exit_code == code, result
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), err
    for word in words:
        assert word in lines[0], (word, err)
    return lines[0]


def ok_json(result: Result) -> Any:
    code, out, _ = result
    assert code == 0, result
    return json.loads(out)


#: Run first in a child interpreter (as ``sitecustomize``, after site-packages and the
#: editable install are set up): every site-packages directory on ``sys.path`` is
#: replaced by its view without the hidden distributions.
_HIDING = """
import json, os, sys
views = json.loads(os.environ["GEOGATEWAY_TEST_SITE_VIEWS"])
sys.path[:] = [views.get(entry, entry) for entry in sys.path]
"""


def without_modules(tmp: Path, *names: str) -> dict[str, str]:
    """The environment of a child interpreter in which the top-level packages ``names``
    (and their ``.libs``, ``.dist-info``) are not installed, as after a plain
    ``pip install geogateway``: ``import`` raises ``ModuleNotFoundError`` and
    ``importlib.util.find_spec`` returns None, as they would."""
    import site
    import tempfile

    hidden = {name.lower() for name in names}
    views = {}
    hook = Path(tempfile.mkdtemp(prefix="without-", dir=tmp))
    (hook / "sitecustomize.py").write_text(_HIDING)
    for number, directory in enumerate(site.getsitepackages()):
        if not os.path.isdir(directory):
            continue
        view = hook / f"site-packages-{number}"
        view.mkdir()
        for entry in os.listdir(directory):
            if entry.split("-")[0].split(".")[0].lower() not in hidden:
                (view / entry).symlink_to(os.path.join(directory, entry))
        views[directory] = str(view)
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(hook),
                                                        os.environ.get("PYTHONPATH")])),
            "GEOGATEWAY_TEST_SITE_VIEWS": json.dumps(views)}
