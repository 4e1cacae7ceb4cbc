"""The README and the documentation site held to the code: every error they quote is the
one raytf raises, the layout (docs/development/contributing.md) names every module and job
there is, and the README states the versions raytf supports. (The site's code examples run
in ``tests/integration/test_readme_snippets.py``; its reference in test_docs_site.py.)"""

import glob
import os
import re

import pytest

from raytf.compat import SUPPORTED
from raytf.config import ScalingConfig
from raytf.data.batching import per_replica_batch
from raytf.data.feed import plan_rows
from raytf.errors import RaytfError
from raytf.group.elastic import choose_world_size
from raytf.group.feasibility import check_satisfiable

pytestmark = pytest.mark.unit

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
with open(os.path.join(ROOT, "README.md")) as _f:
    README = _f.read()


def page(rel: str) -> str:
    """A page of the site, by its path under docs/."""
    with open(os.path.join(ROOT, "docs", rel)) as f:
        return f.read()


# Every page of the site (docs/**/*.md), by its path under docs/.
PAGES = {
    os.path.relpath(p, os.path.join(ROOT, "docs")): page(
        os.path.relpath(p, os.path.join(ROOT, "docs"))
    )
    for p in sorted(glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True))
}
LAYOUT_PAGE = "development/contributing.md"

# Each error message the README or a page quotes, and what raises it.
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
# Quoted with the error's class name in front (the page shows the whole line).
QUOTED_ERRORS["DataShardError: dataset 'train' has 100 rows: fewer than one global batch of "
              "128 (64 per worker x 2 workers), so no step could run"] = lambda: plan_rows(
    "train", 100, 2, 128
)  # fmt: skip
# Lines raytf prints (not raises), and what returns them.
QUOTED_MESSAGES = {
    "global batch 128 does not split over 3 worker(s) x 1 replica(s): running 2 worker(s) "
    "of the 3 that could be placed": lambda: (
        choose_world_size(ScalingConfig(num_workers=(2, 4), global_batch_size=128), 3).note
    ),
}
# What makes an inline code span look like a quoted error (so a new one must be listed).
ERROR_WORDS = re.compile(r": must |does not |, but |cannot |refused|is not a|fewer than")


def _spans(text: str) -> list[str]:
    """Inline code spans (not fenced blocks), whitespace as one space."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    return [" ".join(s.split()) for s in re.findall(r"`([^`]+)`", text)]


def _all_spans() -> list[str]:
    return [s for text in [README, *PAGES.values()] for s in _spans(text)]


@pytest.mark.parametrize("quote", sorted(QUOTED_ERRORS))
def test_each_quoted_error_is_the_one_raised(quote):
    assert quote in _all_spans(), "no page quotes it any more: update QUOTED_ERRORS"
    with pytest.raises(RaytfError) as err:
        QUOTED_ERRORS[quote]()
    raised = str(err.value).rstrip(".")
    if quote.startswith(type(err.value).__name__ + ": "):
        raised = f"{type(err.value).__name__}: {raised}"
    pattern = ".*?".join(re.escape(part.strip()) for part in quote.split("..."))
    assert re.fullmatch(pattern, raised), raised


@pytest.mark.parametrize("quote", sorted(QUOTED_MESSAGES))
def test_each_quoted_message_is_the_one_printed(quote):
    assert quote in _all_spans(), "no page quotes it any more: update QUOTED_MESSAGES"
    assert QUOTED_MESSAGES[quote]() == quote


def test_every_error_like_quote_is_checked():
    checked = {*QUOTED_ERRORS, *QUOTED_MESSAGES}
    unchecked = [s for s in _all_spans() if ERROR_WORDS.search(s) and s not in checked]
    assert unchecked == [], "add these to QUOTED_ERRORS (or quote the raised text)"


def _layout() -> dict[str, str]:
    """The layout block: each top-level entry (``raytf/keras/``) -> its text."""
    block = PAGES[LAYOUT_PAGE].split("## Layout", 1)[1].split("```")[1]
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


NOT_RUN = re.compile(r"<!-- not run here: (.+?) -->\s*$")


def _fenced(text: str) -> list[tuple[str, str, str]]:
    """Each fenced block: (language, its code, the line before its fence)."""
    lines, out = text.splitlines(), []
    for i, line in enumerate(lines):
        m = re.match(r"^```([a-z]+)$", line)
        if m:
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
            out.append((m.group(1), "\n".join(lines[i + 1 : end]) + "\n", before))
    return out


def test_every_code_block_runs_in_the_tests_or_says_why_not():
    """A block is run (the examples that start a run, by test_readme_snippets), is output
    (``text``), or follows a comment saying why it is not run here."""
    from tests.integration.test_readme_snippets import EXAMPLE_PAGES, RUNS, TRACKING, TUTORIAL

    ran = [
        code
        for name in EXAMPLE_PAGES
        for language, code, _ in _fenced(PAGES[name])
        if language == "python" and any(r in code for r in RUNS)
    ]
    ran += [code for language, code, _ in _fenced(PAGES[TUTORIAL]) if language == "python"]
    ran += [code for language, code, _ in _fenced(PAGES[TRACKING]) if language == "python"][:1]
    # The README opens with its two commands and nothing before them: CI runs `make test`
    # itself; the page that repeats them (index.md, quickstart.md) carries the comment.
    opening = _fenced(README)[0][1]
    unmarked = []
    for name, text in [("README.md", README), *PAGES.items()]:
        for language, code, before in _fenced(text):
            if name == "README.md" and code == opening:
                continue
            run = language == "python" and code in ran
            if not (run or language == "text" or NOT_RUN.search(before)):
                unmarked.append(f"{name}: {code.splitlines()[0] if code.strip() else ''}")
    assert unmarked == [], "run it in a test or mark it <!-- not run here: why -->"


def test_the_readmes_links_open_something_readable_outside_the_site():
    """Every relative link of the README (and of cluster_configs/README.md) names a file
    that exists; a page whose entries the site generates (``:::`` directives, ``gen:``
    markers) says, outside the built site, where the same text is: files that exist."""
    for readme in ("README.md", os.path.join("cluster_configs", "README.md")):
        with open(os.path.join(ROOT, readme)) as f:
            text = f.read()
        base = os.path.dirname(os.path.join(ROOT, readme))
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if "://" in target:
                continue
            path = os.path.normpath(os.path.join(base, target))
            assert os.path.isfile(path), (readme, target)
            with open(path) as f:
                body = f.read()
            if ":::" not in body and "<!-- gen:" not in body:
                continue
            note = re.search(r"Outside the built site.*?\n\n", body, re.S)
            assert note, (readme, target)
            named = re.findall(r"`((?:raytf|jobs)/[^`\s]*)`", note.group(0))
            assert named and all(os.path.exists(os.path.join(ROOT, n)) for n in named), target
