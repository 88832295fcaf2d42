"""The public API as a committed baseline, and the changes to it that break callers.

The public API is every name in the ``__all__`` of the packages users import (read
statically with griffe, as the API reference is): its kind, a callable's parameters
(name, kind, default) and a class's public methods and attributes. The baseline,
``tests/docs/api_baseline.json``, is what the last release promised; a change that
breaks a caller (a name, parameter or member removed, a parameter renamed, made
required, moved or of another kind, a default changed) fails ``test_api_stability``
unless the changelog's "Unreleased" section names it (``Breaking: `NAME` ...``).

Write the baseline again after an intended change::

    .venv/bin/python -m tests.docs.api_surface --write
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BASELINE = Path(__file__).with_name("api_baseline.json")
#: The packages users import, as the API reference lists them.
PACKAGES = ("gateway", "gateway.aio", "gateway.transports", "gateway.stores",
            "gateway.consumer", "gateway.relay", "gateway.observability", "replication",
            "durable_queue")

Surface = dict[str, dict[str, Any]]


def _params(obj: Any) -> list[list[str | None]]:
    return [[p.name, p.kind.value, None if p.default is None else str(p.default)]
            for p in obj.parameters if p.name not in ("self", "cls")]


def _entry(obj: Any) -> dict[str, Any]:
    kind = obj.kind.value
    entry: dict[str, Any] = {"kind": kind}
    if kind == "function":
        entry["params"] = _params(obj)
    elif kind == "class":
        entry["params"] = _params(obj)  # its constructor
        members: dict[str, Any] = {}
        for name, member in obj.all_members.items():
            if name.startswith("_"):
                continue
            try:
                target = member.final_target if member.is_alias else member
            except Exception:  # an alias outside the packages: a name only
                members[name] = {"kind": "alias"}
                continue
            members[name] = ({"kind": "function", "params": _params(target)}
                             if target.kind.value == "function" else {"kind": target.kind.value})
        entry["members"] = dict(sorted(members.items()))
    return entry


def surface() -> Surface:
    """The public API of :data:`PACKAGES` now: ``{"module:Name": entry}``."""
    import griffe

    loader = griffe.GriffeLoader(search_paths=[str(ROOT)])
    for top in sorted({p.split(".")[0] for p in PACKAGES}):
        loader.load(top)
    loader.resolve_aliases(implicit=False, external=False)
    found: Surface = {}
    for path in PACKAGES:
        module = loader.modules_collection[path]
        for name in sorted(module.exports or ()):
            obj = module[name]
            found[f"{path}:{name}"] = _entry(obj.final_target if obj.is_alias else obj)
    return found


def _param_breaks(where: str, old: list[list[str | None]],
                  new: list[list[str | None]]) -> list[str]:
    found = []
    by_name = {p[0]: p for p in new}
    positional = [p[0] for p in new if p[1] != "keyword-only"]
    for index, (name, kind, default) in enumerate(old):
        now = by_name.get(str(name))
        if now is None:
            if kind not in ("variadic positional", "variadic keyword"):
                found.append(f"{where}: parameter {name!r} removed")
            continue
        if now[1] != kind:
            found.append(f"{where}: parameter {name!r} is {now[1]}, was {kind}")
        elif kind in ("positional-only", "positional or keyword") and (
                index >= len(positional) or positional[index] != name):
            found.append(f"{where}: parameter {name!r} moved")
        if default is not None and now[2] is None:
            found.append(f"{where}: parameter {name!r} is now required")
        elif default is not None and now[2] != default:
            found.append(f"{where}: parameter {name!r} defaults to {now[2]}, was {default}")
    known = {p[0] for p in old}
    for name, kind, default in new:
        if name not in known and default is None and kind not in (
                "variadic positional", "variadic keyword"):
            found.append(f"{where}: new required parameter {name!r}")
    return found


def breaking(old: Surface, new: Surface) -> list[str]:
    """The changes from ``old`` to ``new`` that break a caller, one line each."""
    found = []
    for where, before in sorted(old.items()):
        now = new.get(where)
        if now is None:
            found.append(f"{where}: removed")
            continue
        if now["kind"] != before["kind"]:
            found.append(f"{where}: is a {now['kind']}, was a {before['kind']}")
            continue
        if "params" in before:
            found += _param_breaks(where, before["params"], now.get("params", []))
        for member, was in before.get("members", {}).items():
            is_now = now.get("members", {}).get(member)
            if is_now is None:
                found.append(f"{where}.{member}: removed")
            elif "params" in was and "params" in is_now:
                found += _param_breaks(f"{where}.{member}", was["params"], is_now["params"])
    return found


def announced(changelog: str) -> str:
    """The lines of the changelog's "Unreleased" section that announce a breaking
    change (they say ``Breaking`` and name it in backticks)."""
    start = changelog.find("## Unreleased")
    if start < 0:
        return ""
    end = changelog.find("\n## ", start + 1)
    section = changelog[start:end if end > 0 else None]
    return "\n".join(line for line in section.splitlines() if "Breaking" in line)


def load_baseline(path: Path = BASELINE) -> Surface:
    data: Surface = json.loads(path.read_text(encoding="utf-8"))
    return data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="write the baseline again")
    args = parser.parse_args()
    now = surface()
    if args.write:
        lines = [f"{json.dumps(k)}: {json.dumps(v, sort_keys=True)}"
                 for k, v in sorted(now.items())]
        BASELINE.write_text("{\n" + ",\n".join(lines) + "\n}\n", encoding="utf-8")
        print(f"wrote {BASELINE.relative_to(ROOT)}: {len(now)} public names")
        return
    for line in breaking(load_baseline(), now):
        print(line)


if __name__ == "__main__":
    main()
