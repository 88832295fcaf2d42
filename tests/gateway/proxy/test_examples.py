"""The proxy's deployment examples: a systemd unit and a Kubernetes sidecar pod."""

from __future__ import annotations

import configparser
import shlex
from pathlib import Path

from gateway.cli._proxy import proxy

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "proxy"
GUIDE = EXAMPLES.parents[1] / "docs" / "guides" / "proxy.md"


def _proxy_options() -> set[str]:
    return {opt for param in proxy.params for opt in getattr(param, "opts", [])}


def test_the_unit_starts_geogateway_proxy_with_known_options() -> None:
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.read_string((EXAMPLES / "geogateway-proxy.service").read_text()
                     .replace("\\\n", " "))
    argv = shlex.split(unit["Service"]["ExecStart"])
    assert Path(argv[0]).name == "geogateway" and argv[1] == "proxy", argv
    options = {a for a in argv[2:] if a.startswith("--")}
    assert options <= _proxy_options(), options - _proxy_options()
    assert {"--tls-cert", "--tls-key"} <= options
    assert unit["Install"]["WantedBy"] == "multi-user.target"


def test_the_sidecar_pod_runs_the_app_and_a_proxy() -> None:
    text = (EXAMPLES / "sidecar.yaml").read_text()
    try:
        import yaml
    except ImportError:
        # No PyYAML: the key lines
        for line in ("kind: ConfigMap", "kind: Pod", "- geogateway", "- proxy",
                     "secretKeyRef:", "configMap:", "gateway.toml: |"):
            assert line in text, line
        return
    docs = list(yaml.safe_load_all(text))
    config_map, pod = (next(d for d in docs if d["kind"] == kind)
                       for kind in ("ConfigMap", "Pod"))
    assert "gateway.toml" in config_map["data"]
    containers = {c["name"]: c for c in pod["spec"]["containers"]}
    sidecar = containers["geogateway-proxy"]
    assert sidecar["command"][:2] == ["geogateway", "proxy"]
    assert {o for o in sidecar["command"] if o.startswith("--")} <= _proxy_options()
    assert any("secretKeyRef" in e.get("valueFrom", {}) for e in sidecar["env"])
    assert "app" in containers


def test_the_proxy_guide_names_both() -> None:
    text = GUIDE.read_text()
    assert "examples/proxy/geogateway-proxy.service" in text
    assert "examples/proxy/sidecar.yaml" in text
