"""Turning observability on (configuration, hooks_from_config) and what it costs when it
is off or not installed: ``import gateway`` and a sender load neither
``prometheus_client`` nor ``opentelemetry``, and a missing extra is a clear
``ConfigError``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from gateway.geo import GatewayConfig
from gateway.observability import PrometheusMetrics, Tracing, hooks_from_config
from replication import ConfigError
from tests.gateway.cli.cli_support import expect_one_line_error

ROOT = Path(__file__).resolve().parents[3]
BASE = 'primary = "local://east"\nsecondary = "local://west"\nentity = "orders"\n'


def load(tmp_path: Path, text: str, env: dict[str, str] | None = None) -> GatewayConfig:
    path = tmp_path / "gateway.toml"
    path.write_text(BASE + text)
    return GatewayConfig.load(path, env=env or {})


def test_the_config_file_turns_metrics_and_tracing_on(tmp_path: Path) -> None:
    config = load(tmp_path, "[metrics]\nenabled = true\n[tracing]\nenabled = true\n")
    assert config.observability.metrics and config.observability.tracing
    registry = CollectorRegistry()
    hooks = hooks_from_config(config, registry=registry)
    assert [type(h) for h in hooks] == [PrometheusMetrics, Tracing]
    assert isinstance(hooks[0], PrometheusMetrics) and hooks[0].registry is registry


def test_both_are_off_unless_asked_for_and_env_can_turn_them_on(tmp_path: Path) -> None:
    config = load(tmp_path, "")
    assert not config.observability.metrics and not config.observability.tracing
    assert hooks_from_config(config) == []
    on = load(tmp_path, "[metrics]\nenabled = false\n",
              env={"GEOGATEWAY_METRICS": "true", "GEOGATEWAY_TRACING": "1"})
    assert on.observability.metrics and on.observability.tracing


@pytest.mark.parametrize(("text", "env", "match"), [
    ("[metrics]\nenabled = 'yes'\n", {}, r"\[metrics\] enabled must be true or false"),
    ("[tracing]\nport = 1\n", {}, r"unknown option 'port' in \[tracing\]"),
    ("metrics = true\n", {}, r"\[metrics\] .* must be a table"),
    ("", {"GEOGATEWAY_TRACING": "maybe"}, r"\$GEOGATEWAY_TRACING must be true or false"),
])
def test_bad_settings_are_one_line_config_errors(tmp_path: Path, text: str,
                                                 env: dict[str, str], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load(tmp_path, text, env=env)


def run(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)


def test_import_gateway_and_a_sender_load_neither_prometheus_nor_opentelemetry(
    tmp_path: Path,
) -> None:
    # Given a fresh interpreter that imports gateway and the observability face, and
    # sends and receives through the embedded namespaces
    script = f"""
import json, sys
import gateway, gateway.aio, gateway.observability
from gateway import GeoReceiver, GeoSender
kw = dict(primary="local://primary", secondary="local://secondary", entity="orders",
          data_dir={str(tmp_path)!r})
with GeoSender(state_dir={str(tmp_path / "state")!r}, **kw) as sender:
    sender.send(b"x")
with GeoReceiver(dedup_store={str(tmp_path / "dedup.db")!r}, **kw) as receiver:
    got = receiver.receive(max_wait=5)
    receiver.complete(got[0])
print(json.dumps(sorted(sys.modules)))
"""
    result = run(script)
    assert result.returncode == 0, result.stderr
    loaded = json.loads(result.stdout)
    # Then neither extra was imported
    assert "gateway.geo.sender._sender" in loaded  # the check can see what was imported
    assert [m for m in loaded if m.split(".")[0] in ("prometheus_client", "opentelemetry")] == []


@pytest.mark.parametrize(("make", "extra"), [
    ("PrometheusMetrics()", "metrics"),
    ("Tracing()", "tracing"),
    ("render_metrics()", "metrics"),
])
def test_a_missing_extra_is_a_config_error_naming_it(make: str, extra: str) -> None:
    # Given an interpreter where neither library can be imported
    script = f"""
import sys
sys.modules["prometheus_client"] = None
sys.modules["opentelemetry"] = None
from gateway.observability import PrometheusMetrics, Tracing, render_metrics
from replication import ConfigError
try:
    {make}
except ConfigError as exc:
    print(exc)
"""
    result = run(script)
    assert result.returncode == 0, result.stderr
    assert f"pip install 'geogateway[{extra}]'" in result.stdout


def test_the_cli_sends_and_receives_with_observability_turned_on_in_its_config(
    dirs: dict[str, Path], run: Any,
) -> None:
    # Given a config file that turns metrics and tracing on
    config = dirs["tmp"] / "gateway.toml"
    config.write_text('primary = "local://primary"\nsecondary = "local://secondary"\n'
                      'entity = "orders"\n[metrics]\nenabled = true\n'
                      '[tracing]\nenabled = true\n')
    # When the CLI sends and receives with it
    code, out, err = run("send", "hello", "--config", str(config), "--json")
    assert code == 0, err
    code, out, err = run("receive", "--config", str(config), "--json", "--wait", "2")
    # Then both work (the spans go to the API's no-op provider here)
    assert code == 0, err
    assert [m["body"] for m in json.loads(out)] == ["hello"]
    # and a bad [metrics] section is a one-line error
    config.write_text(config.read_text() + "[metrics.extra]\n")
    expect_one_line_error(run("send", "x", "--config", str(config)), None, "metrics")
