"""The README held to the code: every error it quotes is the one raytf raises, its layout
names every module and job there is, and it states the versions raytf supports. (Its
code examples run in ``tests/integration/test_readme_snippets.py``.)"""

import os
import re

import pytest

from raytf.compat import SUPPORTED
from raytf.config import ScalingConfig
from raytf.data.batching import per_replica_batch
from raytf.errors import RaytfError
from raytf.group.feasibility import check_satisfiable

pytestmark = pytest.mark.unit

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
with open(os.path.join(ROOT, "README.md")) as _f:
    README = _f.read()

# Each error message the README quotes, and what raises it.
QUOTED_ERRORS = {
    "ScalingConfig.num_workers = -1: must be an integer >= 1, (min, max), or 0 for local "
    "mode (the loop runs in this process, without Ray)": lambda: ScalingConfig(num_workers=-1),
    "global_batch_size = 63 does not divide over 2 replicas in sync ... e.g. 62 or 64": lambda: (
        per_replica_batch(63, 2)
    ),
    "each worker asks for 64 CPU, but the largest node has 4 CPU": lambda: check_satisfiable(
        {"CPU": 64}, 2, "PACK", [{"CPU": 4}]
    ),
}
# What makes an inline code span look like a quoted error (so a new one must be listed).
ERROR_WORDS = re.compile(r": must |does not |, but |cannot |refused|is not a|fewer than")


def _spans(text: str) -> list[str]:
    """Inline code spans (not fenced blocks), whitespace as one space."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    return [" ".join(s.split()) for s in re.findall(r"`([^`]+)`", text)]


@pytest.mark.parametrize("quote", sorted(QUOTED_ERRORS))
def test_each_quoted_error_is_the_one_raised(quote):
    assert quote in _spans(README), "the README no longer quotes it: update QUOTED_ERRORS"
    with pytest.raises(RaytfError) as err:
        QUOTED_ERRORS[quote]()
    pattern = ".*?".join(re.escape(part.strip()) for part in quote.split("..."))
    assert re.fullmatch(pattern, str(err.value).rstrip(".")), str(err.value)


def test_every_error_like_quote_is_checked():
    unchecked = [s for s in _spans(README) if ERROR_WORDS.search(s) and s not in QUOTED_ERRORS]
    assert unchecked == [], "add these to QUOTED_ERRORS (or quote the raised text)"


def _layout() -> dict[str, str]:
    """The README's layout block: each top-level entry (``raytf/keras/``) -> its text."""
    block = README.split("## Layout", 1)[1].split("```")[1]
    entries: dict[str, str] = {}
    for line in block.splitlines():
        if line and not line.startswith(" "):
            key, _, rest = line.partition(" ")
            entries[key] = rest
        elif line.strip():
            entries[key] += " " + line.strip()
    return entries


def test_the_layout_names_every_module_and_job():
    layout = _layout()
    missing = []
    for folder, _, files in os.walk(os.path.join(ROOT, "raytf")):
        rel = os.path.relpath(folder, ROOT)
        if "__pycache__" in rel:
            continue
        parts = rel.split(os.sep)  # raytf/tools/local is described under raytf/tools/
        entry = "/".join(parts[:2]) + "/"
        text = layout.get(entry)
        if text is None:
            missing.append(entry)
            continue
        if len(parts) > 2 and f"{parts[2]}/" not in text:
            missing.append(rel + "/")
        for name in files:
            stem = name[:-3]
            if name.endswith(".py") and stem != "__init__" and not re.search(rf"\b{stem}\b", text):
                missing.append(os.path.join(rel, name))
    jobs = layout["jobs/"]
    missing += [f"jobs/{n}" for n in os.listdir(os.path.join(ROOT, "jobs")) if n not in jobs]
    assert missing == []


def test_the_readme_states_the_supported_versions():
    for package, release in SUPPORTED.items():
        name = {"tensorflow": "TensorFlow", "keras": "Keras", "ray": "Ray"}[package]
        assert f"{name} {release}" in README, f"{name} {release}"
