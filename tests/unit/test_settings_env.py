"""Every RAYTF_* variable the docs name does what they say, and every one raytf reads is
named there: a switch that reads as documented but does nothing is a silent default."""

import dataclasses
import glob
import os
import re

import pytest

from raytf.checkpoint.host_copy import node_copy
from raytf.group import kept
from raytf.settings import Settings

pytestmark = pytest.mark.unit

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCS = ["README.md"] + sorted(
    os.path.relpath(p, ROOT)
    for p in glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True)
)
NAME = re.compile(r"RAYTF_[A-Z0-9_]*[A-Z0-9]")


def _documented() -> set[str]:
    """Every RAYTF_* name on the site: the pages, the README, and the generated table of
    docs/reference/settings.md (each Settings field with a docstring)."""
    names = set()
    for rel in DOCS:
        with open(os.path.join(ROOT, rel)) as f:
            names |= set(NAME.findall(f.read()))
    from tests.unit.test_docs_site import REF as reference

    for line in reference.settings_markdown().splitlines():
        name = NAME.search(line)
        if name and line.rstrip(" |").rsplit("|", 1)[-1].strip():  # a meaning, not blank
            names.add(name.group(0))
    return names


FIELDS = {f.metadata["env"]: f for f in dataclasses.fields(Settings)}


def _other_value(f: dataclasses.Field) -> tuple[str, object]:
    """A raw value for ``f``'s variable and what it must parse to, unlike the default."""
    kind = f.metadata["kind"]
    if kind is bool:
        return ("0", False) if f.default else ("1", True)
    if kind is int:
        return "7", 7
    if kind is float:
        return "7.5", 7.5
    return "/elsewhere/raytf-test", "/elsewhere/raytf-test"


def _keep_scope(monkeypatch) -> None:
    monkeypatch.setenv("RAYTF_KEEP_SCOPE", "team-b")
    assert kept.namespace() == "raytf_kept-team-b"


# Documented variables that are not Settings fields, each with a check of its effect.
EFFECTS = {"RAYTF_KEEP_SCOPE": _keep_scope}


@pytest.mark.parametrize("name", sorted(_documented()))
def test_each_documented_variable_takes_effect(name, monkeypatch):
    if name in EFFECTS:
        EFFECTS[name](monkeypatch)
        return
    assert name in FIELDS, f"the docs name {name}, which raytf does not read"
    f = FIELDS[name]
    raw, value = _other_value(f)
    assert value != f.default
    assert getattr(Settings.from_env({name: raw}), f.name) == value


def test_every_variable_settings_reads_is_documented():
    assert sorted(set(FIELDS) - _documented()) == []


def test_an_empty_host_copy_dir_turns_host_copies_off(tmp_path):
    """As documented: ``RAYTF_HOST_COPY_DIR=""`` (it used to leave /dev/shm on)."""
    assert Settings().host_copy_dir == "/dev/shm"
    off = Settings.from_env({"RAYTF_HOST_COPY_DIR": ""})
    assert off.host_copy_dir == ""
    assert not node_copy("s3://bucket/runs/a", off, sweep=False).enabled
    on = Settings.from_env({"RAYTF_HOST_COPY_DIR": str(tmp_path)})
    assert node_copy("s3://bucket/runs/a", on, sweep=False).dir.startswith(str(tmp_path))


@pytest.mark.parametrize("name", sorted(set(FIELDS) - {"RAYTF_HOST_COPY_DIR"}))
def test_an_empty_value_elsewhere_keeps_the_default(name):
    """``VAR= cmd`` or a YAML ``VAR: ""`` is no value: the default, not an error."""
    f = FIELDS[name]
    assert getattr(Settings.from_env({name: ""}), f.name) == getattr(Settings(), f.name)


@pytest.mark.parametrize(
    "name,raw,value",
    [("RAYTF_KEEP_PROCESSES", "0", 0), ("RAYTF_PROGRESS_SAMPLE_S", "0", 0.0),
     ("RAYTF_FORWARD_CREDENTIALS", "0", False)],
)  # fmt: skip
def test_documented_zeros_are_values(name, raw, value):
    """0 keeps no process, samples no counters, forwards nothing: a value, not unset."""
    f = FIELDS[name]
    assert getattr(Settings.from_env({name: raw}), f.name) == value
