"""The public API against its committed baseline (griffe): a change that breaks callers
fails unless the changelog's "Unreleased" section announces it, and a new public name
is added to the baseline (``python -m tests.docs.api_surface --write``)."""

from __future__ import annotations

import copy

from tests.docs.api_surface import (
    ROOT,
    Surface,
    announced,
    breaking,
    load_baseline,
    surface,
)


def test_no_unannounced_breaking_change_and_the_baseline_is_current() -> None:
    baseline, now = load_baseline(), surface()
    notes = announced((ROOT / "CHANGELOG.md").read_text(encoding="utf-8"))
    unannounced = [line for line in breaking(baseline, now)
                   if f"`{line.split(':')[1].split('.')[0].split()[0]}`" not in notes]
    assert unannounced == [], (
        "breaking changes to the public API: keep the old form, or announce them under "
        "'## Unreleased' in CHANGELOG.md (Breaking: `NAME` ...) and write the baseline "
        "again (.venv/bin/python -m tests.docs.api_surface --write):\n"
        + "\n".join(unannounced))
    added = sorted(set(now) - set(baseline))
    assert added == [], ("new public names: add them to the changelog and the baseline "
                         "(.venv/bin/python -m tests.docs.api_surface --write): "
                         + ", ".join(added))


def test_the_check_sees_each_kind_of_breaking_change() -> None:
    old: Surface = {
        "gateway:send": {"kind": "function", "params": [
            ["message", "positional or keyword", None], ["timeout", "keyword-only", "5.0"],
            ["mode", "keyword-only", "None"]]},
        "gateway:Thing": {"kind": "class", "params": [], "members": {
            "run": {"kind": "function", "params": [["n", "positional or keyword", "1"]]},
            "size": {"kind": "attribute"}}},
        "gateway:gone": {"kind": "function", "params": []},
    }
    assert breaking(old, copy.deepcopy(old)) == []
    new = copy.deepcopy(old)
    del new["gateway:gone"]
    new["gateway:send"]["params"] = [["msg", "positional or keyword", None],
                                     ["timeout", "positional or keyword", "5.0"],
                                     ["mode", "keyword-only", "'passive'"],
                                     ["extra", "keyword-only", None]]
    del new["gateway:Thing"]["members"]["size"]
    new["gateway:Thing"]["members"]["run"]["params"] = [["n", "positional or keyword", None]]
    found = breaking(old, new)
    assert found == [
        "gateway:Thing.run: parameter 'n' is now required",
        "gateway:Thing.size: removed",
        "gateway:gone: removed",
        "gateway:send: parameter 'message' removed",
        "gateway:send: parameter 'timeout' is positional or keyword, was keyword-only",
        "gateway:send: parameter 'mode' defaults to 'passive', was None",
        "gateway:send: new required parameter 'msg'",
        "gateway:send: new required parameter 'extra'",
    ]
    # Announced in the changelog's Unreleased section, a name's breakages are allowed
    notes = announced("# Changelog\n\n## Unreleased\n\n- Breaking: `send` takes msg\n"
                      "- `Thing` has a new method\n\n## 0.1.0\n\n- Breaking: `gone`\n")
    assert "`send`" in notes and "`Thing`" not in notes and "`gone`" not in notes
