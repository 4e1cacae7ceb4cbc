"""The site's reference held to the code: a public name, a config field, a CLI flag, a
``RAYTF_*`` variable, an error or a ``state.json`` field missing from it fails here.

The reference pages are generated when the site is built (mkdocstrings reads the
docstrings; docs/hooks/reference.py makes the CLI, variable, error and metric tables),
so what is checked is that each page asks for every name and that every name has the
docstring the page will show.
"""

import argparse
import ast
import dataclasses
import importlib.util
import os
import re

import pytest
import yaml

import raytf
from tests.unit.test_readme import PAGES, ROOT

pytestmark = pytest.mark.unit


def _reference():
    """docs/hooks/reference.py: the site's generated tables (not a package)."""
    path = os.path.join(ROOT, "docs", "hooks", "reference.py")
    spec = importlib.util.spec_from_file_location("docs_reference", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


REF = _reference()


def _directives(page: str) -> set[str]:
    return set(re.findall(r"^::: (\S+)", PAGES[page], flags=re.M))


def _field_docs(path: str, cls: str) -> dict[str, str | None]:
    """Each annotated field of ``cls`` -> its attribute docstring (None without one)."""
    with open(os.path.join(ROOT, path)) as f:
        tree = ast.parse(f.read())
    (node,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls]
    out = {}
    for field, after in zip(node.body, node.body[1:] + [None]):
        if isinstance(field, ast.AnnAssign):
            doc = None
            if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant):
                doc = after.value.value
            out[field.target.id] = doc
    return out


def test_every_public_name_is_in_the_reference():
    wanted = {f"raytf.{name}" for name in raytf.__all__}
    assert sorted(wanted - _directives("reference/api.md")) == []


def test_the_keras_and_integration_names_are_in_the_reference():
    keras = _directives("reference/keras.md")
    assert "raytf.keras.report_callback.ReportCheckpointCallback" in keras
    assert "raytf.keras.legacy.ReportCheckpointCallback" in keras
    from raytf.keras import _EXPORTS

    for name, module in _EXPORTS.items():
        assert f"{module}.{name}" in keras, name
    from raytf.integrations import ray_train

    text = PAGES["reference/integrations.md"]
    missing = [n for n in ray_train.__all__ if not re.search(rf"\b{n}\b", text)]
    assert missing == []


# Google-style sections, as mkdocstrings renders them (mkdocs.yml: docstring_style: google).
_ARGS = re.compile(r"^\s*Args:\s*$", flags=re.M)
# In raytf/group/, which another change is rewriting now: its Args section comes with it.
_ARGS_PENDING: set[str] = set()


def _module_tree(module: str) -> ast.Module:
    path = os.path.join(ROOT, *module.split("."))
    path = path + ".py" if os.path.isfile(path + ".py") else os.path.join(path, "__init__.py")
    with open(path) as f:
        return ast.parse(f.read())


def _definition(module: str, name: str) -> ast.FunctionDef | ast.ClassDef:
    """The ``def`` or ``class`` a public name is, following ``from ... import`` (raytf's
    ``__init__`` imports lazily; read with ``ast``, nothing imports Ray or TensorFlow)."""
    tree = _module_tree(module)
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
            return node
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    return _definition(node.module, alias.name)
    raise LookupError(f"{module}.{name}")


def _takes_arguments(fn: ast.FunctionDef, method: bool) -> bool:
    a = fn.args
    positional = [*a.posonlyargs, *a.args]
    static = any(ast.unparse(d) == "staticmethod" for d in fn.decorator_list)
    if method and not static:
        positional = positional[1:]  # self, cls
    return bool(positional or a.kwonlyargs or a.vararg or a.kwarg)


def _without_args(qualname: str, node: ast.FunctionDef | ast.ClassDef) -> list[str]:
    """``qualname`` (or its methods) where a callable with parameters has no ``Args:``."""
    if isinstance(node, ast.FunctionDef):
        documented = _ARGS.search(ast.get_docstring(node) or "")
        return [] if documented or not _takes_arguments(node, False) else [qualname]
    out = []
    for item in node.body:
        if not isinstance(item, ast.FunctionDef) or not _takes_arguments(item, True):
            continue
        if item.name == "__init__":  # merged into the class's entry (merge_init_into_class)
            docs = (ast.get_docstring(node) or "") + (ast.get_docstring(item) or "")
            if not _ARGS.search(docs):
                out.append(qualname)
        elif not item.name.startswith("_") and not _ARGS.search(ast.get_docstring(item) or ""):
            out.append(f"{qualname}.{item.name}")
    return out


def _page_objects(page: str) -> list[tuple[str, str]]:
    """(module, name) of each object a reference page renders: ``::: module.Name``, or
    ``::: module`` with an ``options: members:`` list."""
    out = []
    for block in re.split(r"^(?=::: )", PAGES[page], flags=re.M)[1:]:
        target = block.split()[1]
        members = re.findall(r"^\s+- (\w+)\s*$", block, flags=re.M)
        out += [(target, m) for m in members] or [tuple(target.rsplit(".", 1))]
    return out


def test_every_public_callable_with_parameters_has_an_args_section():
    """The reference's parameter tables come from ``Args:``: without one a parameter is
    only its name and type. Every name in ``raytf.__all__`` (classes: their constructor
    and public methods), and those the ``raytf.keras`` and integrations pages render."""
    objects = {("raytf", name) for name in raytf.__all__}
    objects |= {*_page_objects("reference/keras.md"), *_page_objects("reference/integrations.md")}
    assert ("raytf.integrations.tune", "trial_resources") in objects
    missing = []
    for module, name in sorted(objects):
        missing += _without_args(f"{module}.{name}", _definition(module, name))
    assert sorted(set(missing) - _ARGS_PENDING) == []


def test_every_cli_argument_has_help_text(monkeypatch):
    """A blank "meaning" on the CLI page: every argument and sub-command says what it is,
    ``raytf bench``'s own parser's included."""
    from raytf.bench.main import parse_args as bench_args
    from raytf.tools.cli import build_parser

    def without_help(prefix: str, parser: argparse.ArgumentParser) -> list[str]:
        out = []
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                out += [f"{prefix} {c.dest}" for c in action._choices_actions if not c.help]
            elif not isinstance(action, argparse._HelpAction) and not action.help:
                out.append(f"{prefix} {'/'.join(action.option_strings) or action.dest}")
        for name, sub in REF._subparsers(parser).items():
            out += without_help(f"{prefix} {name}", sub)
        return out

    class Built(Exception):
        pass

    def built(parser, *args, **kwargs):
        raise Built(parser)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", built)
    with pytest.raises(Built) as bench:
        bench_args([])
    missing = without_help("raytf", build_parser()) + without_help(
        "raytf bench", bench.value.args[0]
    )
    assert missing == []


@pytest.mark.parametrize(
    "path,cls",
    [("raytf/config/run.py", "ScalingConfig"), ("raytf/config/run.py", "RunConfig"),
     ("raytf/config/run.py", "LoggingConfig"),
     ("raytf/config/fault_tolerance.py", "CheckpointConfig"),
     ("raytf/config/fault_tolerance.py", "FailureConfig"),
     ("raytf/rundir/run_state.py", "RunState"),
     ("raytf/settings.py", "Settings")],
)  # fmt: skip
def test_every_config_field_has_a_docstring(path, cls):
    """The reference shows each field's docstring: a field without one is a blank row."""
    docs = _field_docs(path, cls)
    assert docs and sorted(f for f, d in docs.items() if not d) == []


def test_every_state_json_field_is_documented():
    from raytf.rundir.run_state import RunState

    doc = RunState(name="a", run_dir="/r").document()
    fields = _field_docs("raytf/rundir/run_state.py", "RunState")
    cls_doc = RunState.__doc__
    for key in doc:
        assert key in fields or f"``{key}``" in cls_doc or key.endswith("_total"), key


def test_every_variable_is_in_the_generated_table():
    from raytf.settings import Settings

    table = REF.settings_markdown()
    for f in dataclasses.fields(Settings):
        assert f"`{f.metadata['env']}`" in table
    assert "<!-- gen:settings -->" in PAGES["reference/settings.md"]


def test_every_cli_command_and_flag_is_in_the_generated_page():
    text = REF.cli_markdown()
    flags = REF.cli_flags()
    assert {"raytf status --json", "raytf logs --follow", "raytf local up --nodes"} <= flags
    for flag in flags - {"raytf"}:
        words = flag.split()
        command = " ".join(w for w in words if not w.startswith("-"))
        assert f"### `{command}`" in text, flag
        if words[-1].startswith("-"):
            assert words[-1] in text, flag
    assert "<!-- gen:cli -->" in PAGES["reference/cli.md"]


def test_every_error_is_in_the_hierarchy_with_how_it_reaches_the_caller():
    from raytf import errors

    names = [name for name, _, _ in REF.error_classes()]
    defined = [n for n, v in vars(errors).items() if isinstance(v, type) and n.endswith("Error")]
    assert sorted(names) == sorted(defined)
    assert sorted(set(names) - set(REF.REACHES)) == []
    table = REF.errors_markdown()
    for name in names:
        assert f"| `{name}` |" in table


def test_every_metric_is_in_the_generated_page():
    from raytf.observe.ray_metrics import _GAUGES

    text = REF.metrics_markdown()
    for name in [*_GAUGES, "raytf_metric"]:
        assert f"`ray_{name}`" in text


def test_every_page_is_in_the_nav_and_every_nav_entry_exists():
    with open(os.path.join(ROOT, "mkdocs.yml")) as f:
        config = yaml.load(f, Loader=yaml.BaseLoader)

    def files(node):
        if isinstance(node, str):
            yield node
        elif isinstance(node, list):
            for item in node:
                yield from files(item)
        elif isinstance(node, dict):
            for value in node.values():
                yield from files(value)

    nav = set(files(config["nav"]))
    assert nav == set(PAGES)


def test_every_marker_has_a_generator():
    for name, text in PAGES.items():
        for marker in REF.MARKER.findall(text):
            assert marker in REF.GENERATORS, (name, marker)


def test_the_readme_is_short_and_starts_with_the_two_commands():
    from tests.unit.test_readme import README

    lines = README.splitlines()
    assert len(lines) <= 150
    body = [line for line in lines if line.strip()]
    assert body[1] == "```bash"
    assert body[2].startswith("make demo") and body[3].startswith("make test")


def test_every_error_a_failed_run_can_hold_is_importable_from_raytf():
    """``TrainingFailedError.causes`` holds raytf's errors (its docstring names them):
    each is importable where the user catches the failure."""
    import raytf
    from raytf.errors import TrainingFailedError

    doc = " ".join(raytf.Trainer.fit.__doc__.split())
    named = set(re.findall(r"``(\w+Error)``", doc))
    assert {"WorkerError", "WorkerDiedError", "WorkerSetupError", "CheckpointStorageError"} <= named
    assert named <= set(raytf.__all__), sorted(named - set(raytf.__all__))
    assert TrainingFailedError.__name__ in raytf.__all__


# What a docs-only venv (`make docs`: the docs extra alone) does not have.
_NOT_IN_DOCS_VENV = ("ray", "tensorflow", "keras", "numpy", "fsspec", "matplotlib", "tensorboardX")


def test_the_generated_tables_need_none_of_raytfs_dependencies(tmp_path):
    """Every table the hook makes, in a process where raytf's dependencies cannot be
    imported and raytf is found only as the checkout's source (``on_config``), as in
    the venv `make docs` builds: the same text as here."""
    import subprocess
    import sys

    script = tmp_path / "docs_only.py"
    hook_path = os.path.join(ROOT, "docs", "hooks", "reference.py")
    script.write_text(
        f"""
import importlib.abc, importlib.util, json, sys
class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in {_NOT_IN_DOCS_VENV!r}:
            raise ImportError("not in the docs venv: " + name)
sys.meta_path.insert(0, Absent())
spec = importlib.util.spec_from_file_location("hook", {hook_path!r})
hook = importlib.util.module_from_spec(spec)
spec.loader.exec_module(hook)
hook.on_config({{}})
print(json.dumps({{name: gen() for name, gen in hook.GENERATORS.items()}}))
"""
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        # -S: no site-packages at all (nor raytf's editable install), the stdlib alone
        [sys.executable, "-S", str(script)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    tables = __import__("json").loads(proc.stdout)
    here = _reference()
    assert tables == {name: gen() for name, gen in here.GENERATORS.items()}


def test_every_page_says_the_version_and_license_raytf_reports():
    text = _reference().footer()
    assert raytf.__version__ in text and "Apache-2.0" in text and raytf.DISTRIBUTION in text


def test_the_gallery_shows_every_job_and_every_job_keeps_raytfs_recovery():
    """The examples page names every job of jobs/ with its docstring's command lines;
    no job turns recovery off by default (``--max-failures`` unset: raytf's own)."""
    text = _reference().jobs_markdown()
    jobs = sorted(n for n in os.listdir(os.path.join(ROOT, "jobs")) if n.endswith(".py"))
    assert [n for n in jobs if f"### `jobs/{n}`" not in text] == []
    assert text.count("```bash") >= len(jobs) - 1  # all but one show how they are run
    for name in jobs:
        with open(os.path.join(ROOT, "jobs", name)) as f:
            tree = ast.parse(f.read())
        for call in ast.walk(tree):
            if (
                isinstance(call, ast.Call)
                and getattr(call.func, "attr", "") == "add_argument"
                and call.args
                and getattr(call.args[0], "value", None) == "--max-failures"
            ):
                default = {k.arg: k.value for k in call.keywords}.get("default")
                assert default is None or getattr(default, "value", 0) is None, name


def test_the_cli_table_shows_a_default_of_0_and_hides_unset_ones():
    parser = argparse.ArgumentParser()
    parser.add_argument("--zero", type=int, default=0, help="0: none")
    parser.add_argument("--unset", default=None)
    parser.add_argument("--flag", action="store_true")
    rows = {
        row.split("|")[1].strip(): row.split("|")[2].strip()
        for row in _reference()._arguments(parser)
    }
    assert rows == {"`--zero`": "`0`", "`--unset`": "", "`--flag`": ""}
