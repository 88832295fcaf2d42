"""The version is written once, in ``gateway.__version__``: the distribution's metadata,
``geogateway --version`` and the changelog's newest release agree with it."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

import gateway

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
#: A release heading of CHANGELOG.md: ``## 0.1.0`` (maybe followed by a date).
RELEASE = re.compile(r"^## (\d+\.\d+\.\d+\S*)", re.MULTILINE)


def test_pyproject_reads_the_version_from_the_package() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in project["project"]
    assert "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "gateway.__version__"}


def test_the_installed_distribution_has_that_version() -> None:
    # (an editable install records the version it was installed with: reinstall after
    # changing it)
    assert importlib.metadata.version("geogateway") == gateway.__version__


def test_the_command_prints_it() -> None:
    script = Path(sys.executable).with_name("geogateway")
    launcher = [str(script)] if script.exists() else [sys.executable, "-m", "gateway.cli"]
    done = subprocess.run([*launcher, "--version"], capture_output=True, text=True,
                          timeout=60, check=False, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"geogateway, version {gateway.__version__}"


def test_the_changelog_names_it_as_its_newest_release() -> None:
    releases = RELEASE.findall((ROOT / "CHANGELOG.md").read_text(encoding="utf-8"))
    assert releases, "CHANGELOG.md has no release heading (## X.Y.Z)"
    assert releases[0] == gateway.__version__
