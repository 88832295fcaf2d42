"""``geogateway namespace down|up|faults|status`` act on the namespaces the
configuration names (``--config``, ``$GEOGATEWAY_CONFIG``), in its data directory, so
that ``geogateway status`` sees what they did; an Azure namespace is refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.gateway.cli.cli_support import Run, expect_one_line_error, ok_json

pytestmark = pytest.mark.usefixtures("dirs")

AZURE = ("Endpoint=sb://geogateway-test.invalid/;SharedAccessKeyName=Root;"
         "SharedAccessKey=SECRET123=")


def config_file(tmp: Path, primary: str = "local://east", secondary: str = "local://west"
                ) -> Path:
    """A configuration whose namespaces live in a data directory of its own."""
    path = tmp / "gateway.toml"
    path.write_text(f'primary = "{primary}"\nsecondary = "{secondary}"\nentity = "orders"\n'
                    f'data_dir = "{tmp / "custom-data"}"\n')
    return path


def states(run: Run, *args: str) -> dict[str, Any]:
    """``geogateway status --json``: each namespace's state, by the role it is set up for."""
    code, out, err = run("status", "--json", *args)
    assert code in (0, 3), err
    return {n["preferred"]: n["state"] for n in ok_json((0, out, err))["namespaces"]}


@pytest.fixture
def no_data_dir_env(dirs: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> Path:
    """No ``$GEOGATEWAY_DATA_DIR`` (the file's data_dir counts; the environment's would
    win over it); the platform's default data directory is a temporary one, returned."""
    monkeypatch.delenv("GEOGATEWAY_DATA_DIR")
    monkeypatch.setenv("XDG_DATA_HOME", str(dirs["tmp"] / "xdg"))
    return dirs["tmp"] / "xdg"


@pytest.mark.usefixtures("no_data_dir_env")
def test_down_with_config_takes_down_the_configured_primary(run: Run,
                                                           dirs: dict[str, Path]) -> None:
    # Given a configuration whose primary is local://east under its own data directory
    config = config_file(dirs["tmp"])
    assert states(run, "--config", str(config)) == {"primary": "up", "secondary": "up"}
    # When its primary is taken down
    code, out, err = run("namespace", "down", "primary", "--config", str(config))
    # Then `status --config` shows that namespace down, and its control file is there
    assert code == 0, err
    assert "east" in out and "down" in out
    assert states(run, "--config", str(config)) == {"primary": "down", "secondary": "up"}
    assert (dirs["tmp"] / "custom-data" / "east.control.json").exists()
    assert not (dirs["tmp"] / "xdg").exists()  # nothing under the default data directory
    # And `up` brings it back
    assert run("namespace", "up", "primary", "--config", str(config))[0] == 0
    assert states(run, "--config", str(config)) == {"primary": "up", "secondary": "up"}


@pytest.mark.usefixtures("no_data_dir_env")
def test_the_config_from_the_environment_counts_too(run: Run, dirs: dict[str, Path],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GEOGATEWAY_CONFIG", str(config_file(dirs["tmp"])))
    # When the secondary is named by its own name, and faults are set on the primary
    assert run("namespace", "down", "west")[0] == 0
    code, out, err = run("namespace", "faults", "primary", "--latency", "0.5")
    assert code == 0, err
    assert out.startswith("namespace east (primary): latency 0.5 s")
    # Then status (with the same environment) sees both
    assert states(run)["secondary"] == "down"
    shown = {e["name"]: e for e in ok_json(run("namespace", "status", "--json"))}
    assert set(shown) == {"east", "west"}
    assert shown["east"]["latency"] == 0.5 and shown["west"]["up"] is False


@pytest.mark.parametrize("command", [["down"], ["up"], ["faults", "--latency", "1"]])
def test_an_azure_namespace_is_refused(run: Run, dirs: dict[str, Path],
                                       command: list[str]) -> None:
    # Given a configuration whose primary is in Azure
    config = config_file(dirs["tmp"], primary=AZURE)
    # When it is to be taken down / Then it is refused with the reason, and no key
    line = expect_one_line_error(
        run("namespace", command[0], "primary", *command[1:], "--config", str(config)), 2,
        "geogateway-test.invalid", "Azure", "local://")
    assert "SECRET123" not in line
    assert not list((dirs["tmp"] / "custom-data").glob("*.control.json"))


def test_a_name_the_config_does_not_know_is_refused(run: Run, dirs: dict[str, Path]) -> None:
    config = config_file(dirs["tmp"])
    line = expect_one_line_error(run("namespace", "down", "north", "--config", str(config)), 2,
                                 "'north'")
    assert "east" in line and "west" in line
