"""Reference tables generated from the code at build time (an mkdocs hook).

A page holds a marker such as ``<!-- gen:settings -->`` and the hook puts the
table there, so the site's CLI, ``RAYTF_*`` variables, exception hierarchy and
Prometheus metrics are the code's own. Imports only the argparse parsers, the
``Settings`` dataclass and the failure policy, from the checkout's source (none
of them imports TensorFlow, Ray, NumPy or fsspec: the site builds with the docs
extra alone, ``make docs``); the tables' prose is read statically with ``ast``.
The tests call the same functions (tests/unit/test_docs_site.py).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import dataclasses
import io
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MARKER = re.compile(r"<!-- gen:([a-z_]+) -->")


def _source(rel: str) -> ast.Module:
    with open(os.path.join(ROOT, rel)) as f:
        return ast.parse(f.read())


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


# -- the CLI ---------------------------------------------------------------------------


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _helps(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Each sub-command's one-line help, as ``raytf --help`` lists it."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return {a.dest: a.help or "" for a in action._choices_actions}
    return {}


def _arguments(parser: argparse.ArgumentParser) -> list[str]:
    rows = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        name = ", ".join(action.option_strings) or action.dest.upper()
        if action.choices and not action.option_strings:
            name = " / ".join(action.choices)
        default = ""
        # By identity: 0 == False, and a default of 0 (none, off) is one to show.
        unset = action.default is None or action.default is False
        if action.option_strings and not unset and action.default != argparse.SUPPRESS:
            default = f"`{action.default}`"
        help_text = action.help or ""
        if action.choices and action.option_strings:
            help_text = f"one of {', '.join(map(str, action.choices))}. {help_text}".strip()
        rows.append(f"| `{name}` | {default} | {_cell(help_text)} |")
    return rows


def _command(prefix: str, parser: argparse.ArgumentParser, help_text: str) -> list[str]:
    out = [f"### `{prefix}`", ""]
    if help_text:
        out += [_cell(help_text[0].upper() + help_text[1:]) + ".", ""]
    if parser.description and parser.description != help_text:
        out += [_cell(parser.description), ""]
    out += ["```text", parser.format_usage().strip(), "```", ""]
    rows = _arguments(parser)
    if rows:
        out += ["| argument | default | meaning |", "| --- | --- | --- |", *rows, ""]
    helps = _helps(parser)
    for name, sub in _subparsers(parser).items():
        out += _command(f"{prefix} {name}", sub, helps.get(name, ""))
    return out


def cli_markdown() -> str:
    """Every ``raytf`` sub-command, its usage and arguments, from ``build_parser()``."""
    from raytf.bench.checkpoints_cli import parse_args as checkpoints_args
    from raytf.bench.main import parse_args as bench_args
    from raytf.bench.node_loss import parse_args as node_loss_args
    from raytf.bench.scale import parse_args as scale_args
    from raytf.tools.cli import build_parser

    def help_of(parse) -> str:
        text = io.StringIO()
        with contextlib.redirect_stdout(text), contextlib.suppress(SystemExit):
            parse(["--help"])
        return text.getvalue().strip()

    parser = build_parser()
    helps = _helps(parser)
    out = []
    for name, sub in _subparsers(parser).items():
        if name == "bench":  # its own parsers take every option after the word
            out += ["### `raytf bench`", "", _cell(helps[name]) + ".", ""]
            out += ["```text", help_of(bench_args), "```", ""]
            out += ["### `raytf bench checkpoints`", ""]
            out += ["A large model's checkpoints: overhead, recovery, goodput, and by size.", ""]
            out += ["```text", help_of(checkpoints_args), "```", ""]
            out += ["### `raytf bench node-loss`", ""]
            out += ["A lost node's cost under Ray's default health checks.", ""]
            out += ["```text", help_of(node_loss_args), "```", ""]
            out += ["### `raytf bench control-plane`", ""]
            out += ["The driver from 4 to 1,024 workers, over simulated ranks.", ""]
            out += ["```text", help_of(scale_args), "```", ""]
            continue
        out += _command(f"raytf {name}", sub, helps.get(name, ""))
    return "\n".join(out)


def cli_flags() -> set[str]:
    """Every sub-command path and option, e.g. ``raytf logs --follow``: what the page
    must name."""
    from raytf.tools.cli import build_parser

    found: set[str] = set()

    def walk(prefix: str, parser: argparse.ArgumentParser) -> None:
        found.add(prefix)
        for action in parser._actions:
            for option in action.option_strings:
                if option not in ("-h", "--help"):
                    found.add(f"{prefix} {option}")
        for name, sub in _subparsers(parser).items():
            if name != "bench":
                walk(f"{prefix} {name}", sub)

    walk("raytf", build_parser())
    return found


# -- RAYTF_* variables ---------------------------------------------------------------


def settings_docs() -> dict[str, str]:
    """Each ``Settings`` field's attribute docstring (the string after the field)."""
    (cls,) = [
        n for n in _source("raytf/settings.py").body
        if isinstance(n, ast.ClassDef) and n.name == "Settings"
    ]  # fmt: skip
    docs = {}
    for node, after in zip(cls.body, cls.body[1:] + [None]):
        if isinstance(node, ast.AnnAssign) and isinstance(after, ast.Expr):
            if isinstance(after.value, ast.Constant) and isinstance(after.value.value, str):
                docs[node.target.id] = " ".join(after.value.value.split())
    return docs


def _default(value) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "`1`" if value else "`0`"
    if isinstance(value, str):
        home = os.path.expanduser("~")
        shown = "~" + value[len(home) :] if value.startswith(home + os.sep) else value
        return f"`{shown}`" if shown else '`""`'
    return f"`{value:g}`" if isinstance(value, float) else f"`{value}`"


def settings_markdown() -> str:
    """The ``RAYTF_*`` variables ``raytf.settings.Settings`` reads: name, type, default,
    meaning."""
    from raytf.settings import Settings

    docs = settings_docs()
    kinds = {bool: "bool (1/0)", int: "integer", float: "seconds or number", str: "string"}
    rows = ["| variable | type | default | meaning |", "| --- | --- | --- | --- |"]
    for f in dataclasses.fields(Settings):
        kind = kinds[f.metadata["kind"]]
        if f.metadata["kind"] is float and not f.name.endswith("_s"):
            kind = "number"
        default = f.default if f.default is not dataclasses.MISSING else None
        rows.append(
            f"| `{f.metadata['env']}` | {kind} | {_default(default)} | "
            f"{_cell(docs.get(f.name, ''))} |"
        )
    return "\n".join(rows)


# -- errors --------------------------------------------------------------------------

# How each error reaches the caller of fit(); the retry column comes from the policy.
REACHES = {
    "RaytfError": "the base class: `except raytf.RaytfError` catches every one below",
    "ConfigError": "raised directly, before anything starts (a config value, the storage "
    "probe); also a `ValueError`",
    "UnsatisfiableResourcesError": "raised directly by `fit()`, before any placement group",
    "PlacementTimeoutError": "the cause of a `TrainingFailedError` (`err.causes[0]`, "
    "`err.__cause__`): the group could be held but was not placed within "
    "`RunConfig.placement_timeout_s`",
    "PortClashError": "handled inside the run: the group restarts on new ports "
    "(`RAYTF_MAX_PORT_RETRIES` times), then the cause of a `TrainingFailedError`",
    "WorkerSetupError": "a failure of the attempt; past the retries, the cause of a "
    "`TrainingFailedError`",
    "UserCodeLoadError": "the cause of a `TrainingFailedError`, at once",
    "WorkerError": "the cause of a `TrainingFailedError`, with `rank`, `exc_type` and the "
    "worker's `traceback_text`",
    "WorkerDiedError": "a failure of the attempt; past the retries, a cause of "
    "`TrainingFailedError`",
    "TrainingFailedError": "raised by `fit()` when the run ends in failure; `causes` lists "
    "every failure, first first; `result` holds the partial `Result`",
    "CheckpointRestoreError": "handled inside the run: the checkpoint is marked bad and the "
    "one before it restored",
    "CheckpointMismatchError": "the cause of a `TrainingFailedError`, at once; no file touched",
    "CheckpointStorageError": "a failure of the attempt (storage failed while reading a "
    "checkpoint); past the retries, a cause of `TrainingFailedError`",
    "StorageUnavailableError": "the cause of a `TrainingFailedError`: the run directory "
    "was unwritable for `RAYTF_STORAGE_OUTAGE_S`",
    "RunDirInUseError": "raised directly by `fit()`: another driver holds the run "
    "directory's lease",
    "LeaseLostError": "the cause of a `TrainingFailedError`: another driver took the lease over",
    "WorkerHangError": "a failure of the attempt; past the retries, a cause of "
    "`TrainingFailedError`",
    "DataShardError": "raised directly when the shards are checked before start (too "
    "small a dataset); the cause of a `TrainingFailedError` when found at run time",
    "DependencyError": "the cause of a `TrainingFailedError`, at once: every attempt has "
    "the same install",
}


def error_classes() -> list[tuple[str, list[str], str]]:
    """``(name, bases, first docstring line)`` of each class in raytf/errors.py."""
    out = []
    for node in _source("raytf/errors.py").body:
        if isinstance(node, ast.ClassDef):
            doc = " ".join((ast.get_docstring(node) or "").split("\n\n")[0].split())
            out.append((node.name, [ast.unparse(b) for b in node.bases], doc))
    return out


def _retried(name: str) -> str:
    from raytf import errors
    from raytf.driver.failure_policy import COLLATERAL_ERRORS, FailureKind, classify

    if name in ("RaytfError", "TrainingFailedError", "ConfigError", "RunDirInUseError"):
        return "—"
    if name in ("UnsatisfiableResourcesError", "DataShardError", "UserCodeLoadError"):
        return "no"
    if name in ("PlacementTimeoutError", "StorageUnavailableError", "LeaseLostError"):
        return "no: ends the run"
    if name == "PortClashError":
        return "yes, on new ports"
    if name == "WorkerError":  # by what the user's code raised
        return (
            "no, unless `retry_user_errors`; yes (`collective`) when it is TF's abort of a "
            "collective a peer left ("
            + ", ".join(f"`{e}`" for e in sorted(COLLATERAL_ERRORS))
            + ")"
        )
    cls = getattr(errors, name)
    kind = classify(cls.__new__(cls))
    if kind is FailureKind.RESTORE:
        return "yes, from the checkpoint before (not counted)"
    if kind in (FailureKind.DEPENDENCY, FailureKind.MISMATCH):
        return "no"
    if kind is FailureKind.USER_ERROR:
        return "no, unless `FailureConfig(retry_user_errors=True)`"
    return f"yes (`{kind.value}`), within `FailureConfig.max_failures`"


def errors_markdown() -> str:
    """The exception hierarchy of raytf/errors.py as a tree, then how each reaches you."""
    classes = error_classes()
    children: dict[str, list[str]] = {}
    for name, bases, _ in classes:
        for base in bases:
            children.setdefault(base, []).append(name)
    lines = ["```text"]

    def tree(name: str, depth: int) -> None:
        lines.append("    " * depth + name)
        for child in children.get(name, []):
            tree(child, depth + 1)

    tree("RaytfError", 0)
    lines += ["```", ""]
    lines += [
        "| error | what it means | how it reaches you | retried |",
        "| --- | --- | --- | --- |",
    ]
    for name, _bases, doc in classes:
        lines.append(
            f"| `{name}` | {_cell(doc)} | {_cell(REACHES.get(name, ''))} | {_retried(name)} |"
        )
    return "\n".join(lines)


# -- Prometheus metrics --------------------------------------------------------------


def metrics() -> dict[str, str]:
    """Ray metric name -> description, read from raytf/observe/ray_metrics.py."""
    found = {}
    for node in ast.walk(_source("raytf/observe/ray_metrics.py")):
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "_GAUGES":
            found.update(ast.literal_eval(node.value))
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "Gauge":
            if isinstance(node.args[0], ast.Constant):
                desc = [k.value.value for k in node.keywords if k.arg == "description"]
                found[node.args[0].value] = desc[0] if desc else ""
    return found


def metrics_markdown() -> str:
    rows = ["| Prometheus name | tags | meaning |", "| --- | --- | --- |"]
    for name, desc in metrics().items():
        tags = "`run`, `name` (the metric's)" if name == "raytf_metric" else "`run`"
        rows.append(f"| `ray_{name}` | {tags} | {_cell(desc)} |")
    return "\n".join(rows)


# -- the examples gallery ------------------------------------------------------------

# The training jobs first, in the order a newcomer meets them; the tools after.
JOB_ORDER = (
    "train_digits.py",
    "train_synthetic.py",
    "train_keras_fit.py",
    "train_keras.py",
    "train_tf_keras.py",
    "ray_train_tf.py",
    "train_ray_data.py",
    "tune_keras.py",
    "data_throughput.py",
    "benchmark.py",
    "gpu_check.py",
)


def jobs_markdown() -> str:
    """Each job of ``jobs/``, from its module docstring: what it is, how it is run (the
    docstring's indented lines), and the rest of its first paragraphs."""
    names = sorted(os.listdir(os.path.join(ROOT, "jobs")))
    names = [n for n in JOB_ORDER if n in names] + [
        n for n in names if n.endswith(".py") and n not in JOB_ORDER
    ]
    out = []
    for name in names:
        doc = ast.get_docstring(_source(os.path.join("jobs", name))) or ""
        title, _, rest = doc.partition("\n")
        commands, prose = [], []
        for para in rest.strip("\n").split("\n\n"):
            lines = para.splitlines()
            if lines and all(line.startswith("    ") for line in lines if line.strip()):
                commands += [line[4:] for line in lines]
            elif len(prose) < 2:
                prose.append(" ".join(para.split()))
        out += [f"### `jobs/{name}`", "", _cell(title), ""]
        if commands:
            out += ["```bash", *commands, "```", ""]
        out += [p + "\n" for p in prose]
    return "\n".join(out)


GENERATORS = {
    "cli": cli_markdown,
    "settings": settings_markdown,
    "errors": errors_markdown,
    "metrics": metrics_markdown,
    "jobs": jobs_markdown,
}


def render(markdown: str) -> str:
    """The page with each ``<!-- gen:NAME -->`` marker replaced by its table."""
    return MARKER.sub(lambda m: GENERATORS[m.group(1)](), markdown)


def on_config(config, **_):  # the mkdocs hook: raytf importable from the checkout
    # `make docs` installs the docs extra only, not raytf; mkdocs restores sys.path after
    # loading a hook's module, not after this event.
    if ROOT not in sys.path:
        sys.path.append(ROOT)
    config["copyright"] = footer()
    return config


def footer() -> str:
    """Every page's footer: the distribution, its version and license (pyproject.toml's)."""
    with open(os.path.join(ROOT, "pyproject.toml")) as f:
        text = f.read()
    field = {k: re.search(rf'^{k} = "([^"]+)"', text, re.M).group(1) for k in ("name", "version")}
    license_ = re.search(r'^license = "([^"]+)"', text, re.M).group(1)
    return f"{field['name']} {field['version']} · {license_} license · `raytf version` says yours"


def on_page_markdown(markdown: str, **_) -> str:  # the mkdocs hook
    return render(markdown)
