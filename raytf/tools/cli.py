"""The ``raytf`` command. Sub-commands grow with the project; each is a small function.

Each imports what it needs when it runs: the parser alone imports no storage
library, no Ray and no TensorFlow (``--help`` is instant, and the docs site's
CLI page is built from it with only the docs extra installed).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from raytf.rundir.paths import STATE_FILE


def _status(args: argparse.Namespace) -> int:
    from raytf.tools.runs import read_state

    try:
        doc = read_state(args.run_dir)
    except FileNotFoundError:
        print(
            f"raytf status: no {STATE_FILE} in {args.run_dir}: not a raytf run directory",
            file=sys.stderr,
        )
        return 2
    except ValueError as exc:  # not JSON, or not an object: damaged, or not raytf's
        print(f"raytf status: {STATE_FILE} in {args.run_dir} is unreadable: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(doc, indent=2, sort_keys=True))
        return 0
    import time

    from raytf.rundir.run_log import read_run_log
    from raytf.tools.status_view import format_status

    try:
        records = read_run_log(args.run_dir)
    except OSError:  # the state alone still says most of it
        records = []
    try:
        print(format_status(doc, records, time.time()))
    except (TypeError, AttributeError, ValueError, KeyError) as exc:
        print(
            f"raytf status: {STATE_FILE} in {args.run_dir} holds fields raytf did not write "
            f"({type(exc).__name__}: {exc}); `raytf status --json` shows it as it is",
            file=sys.stderr,
        )
        return 2
    return 0


def _runs(args: argparse.Namespace) -> int:
    import time

    from raytf.rundir.storage import Storage
    from raytf.tools.runs import format_runs, read_runs, summary

    storage = Storage(args.storage_path)
    if not storage.exists():
        print(f"raytf runs: {args.storage_path} does not exist", file=sys.stderr)
        return 2
    docs = read_runs(storage)
    if args.json:
        print(json.dumps([summary(d) for d in docs], indent=2, sort_keys=True))
    elif not docs:
        print(f"no runs under {args.storage_path} (no subdirectory with a {STATE_FILE})")
    else:
        print(format_runs(docs, time.time()))
    return 0


def _logs(args: argparse.Namespace) -> int:
    from raytf.rundir.run_log import LOGS_DIR
    from raytf.rundir.storage import Storage
    from raytf.tools import logs

    storage = Storage(args.run_dir)
    found = logs.rank_logs(storage) if storage.exists(LOGS_DIR) else {}
    if not found:
        print(f"raytf logs: no rank logs in {storage.url(LOGS_DIR)}", file=sys.stderr)
        return 2
    if args.rank is not None and args.rank not in found:
        ranks = ", ".join(str(r) for r in found)
        print(f"raytf logs: no log of rank {args.rank} (there are ranks {ranks})", file=sys.stderr)
        return 2
    ranks = list(found) if args.rank is None else [args.rank]
    prefixed = args.rank is None
    try:
        if args.follow:
            logs.follow(
                logs.Follower(
                    storage, ranks if args.rank is not None else None, sys.stdout, prefixed
                )
            )
        else:
            logs.print_logs(storage, ranks, sys.stdout, prefixed)
    except KeyboardInterrupt:
        return 0
    except BrokenPipeError:  # `raytf logs RUN | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return 0


def _plot(args: argparse.Namespace) -> int:
    from raytf.rundir.run_log import RUN_LOG, read_run_log
    from raytf.rundir.run_state import load_previous
    from raytf.rundir.storage import Storage
    from raytf.tools.plot_data import plot_data

    storage = Storage(args.run_dir)
    doc = load_previous(storage)
    data = plot_data(read_run_log(storage), doc)
    if data is None:
        print(
            f"raytf plot: no reports of rank 0 in {storage.url(RUN_LOG)}: nothing to plot",
            file=sys.stderr,
        )
        return 2
    from raytf.tools.plot import default_out, draw

    out = args.out or default_out(args.run_dir, doc.get("name"))
    title = f"{doc.get('name', args.run_dir)}: {doc.get('state', '?')}"
    print(draw(data, out, title))
    return 0


def _validate(args: argparse.Namespace) -> int:
    from raytf.tools.validate.launcher import validate_file

    job = None
    if args.job_resources:
        try:
            job = json.loads(args.job_resources)
            assert isinstance(job, dict)
        except (ValueError, AssertionError):
            print(
                f"raytf validate: --job-resources {args.job_resources!r}: "
                'give a JSON object, e.g. \'{"GPU": 1, "CPU": 8}\'',
                file=sys.stderr,
            )
            return 2
    if not args.files and not args.storage:
        print("raytf validate: give cluster YAML files, --storage, or both", file=sys.stderr)
        return 2
    errors = 0
    if args.storage:
        from raytf.tools.validate.storage import check_storage

        problems = check_storage("job", "--storage", args.storage)
        for problem in problems:
            print(problem, file=sys.stderr)
        errors += len(problems)
        if not problems:
            print(f"--storage {args.storage}: ok")
    for path in args.files:
        problems = validate_file(path, job)
        for problem in problems:
            print(problem, file=sys.stderr)
        bad = [p for p in problems if not p.warning]
        errors += len(bad)
        if not bad:
            print(f"{path}: ok")
    return 2 if errors else 0


def _bench(args: argparse.Namespace) -> int:
    from raytf.bench.main import main as bench_main

    bench_main(args.args)
    return 0


def _export(args: argparse.Namespace) -> int:
    from raytf.checkpoint.model_files import export

    out = args.out or ("model.keras" if args.format == "keras" else "saved_model")
    try:
        step = export(args.run_dir, out, step=args.step, fmt=args.format)
    except FileNotFoundError as exc:
        print(f"raytf export: {exc}", file=sys.stderr)
        return 2
    print(f"{out}: checkpoint at step {step} of {args.run_dir} ({args.format})")
    return 0


def _pool(args: argparse.Namespace) -> int:
    import os

    import ray

    from raytf.group import kept
    from raytf.group.shipping import worker_runtime_env

    ray.init(address=os.environ.get("RAY_ADDRESS", "auto"), logging_level="ERROR")
    if args.action == "start":
        # The runs' own raytf (as their workers get it), or no run would claim them.
        n = kept.start(args.per_node, args.idle_s, runtime_env=worker_runtime_env())
        print(f"started {n} process(es); each exits after {args.idle_s:.0f} s without a run")
    elif args.action == "stop":
        print(f"stopped {kept.stop()} process(es)")
    else:
        for row in kept.listing():
            print(json.dumps(row, sort_keys=True))
    return 0


def _version(_: argparse.Namespace) -> int:
    from raytf import __version__

    print(__version__)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="raytf", description="Ray cluster trainer for TensorFlow")
    sub = parser.add_subparsers(dest="command", required=True)
    status = sub.add_parser("status", help="print a run's state (--json for scripts)")
    status.add_argument("run_dir", help="the run directory: STORAGE_PATH/NAME")
    status.add_argument(
        "--json", action="store_true", help="state.json (checkpoints still there), for scripts"
    )
    status.set_defaults(func=_status)
    runs = sub.add_parser("runs", help="list the runs under a storage path, newest first")
    runs.add_argument("storage_path", help="RunConfig.storage_path: a directory or URL")
    runs.add_argument("--json", action="store_true", help="one JSON list, for scripts")
    runs.set_defaults(func=_runs)
    logs = sub.add_parser(
        "logs",
        help="print each rank's output (RUN_DIR/logs); --follow to keep printing",
        description="Without --rank, every rank's log, each line prefixed '(rank R) ': "
        "the files one after another, or with --follow interleaved as lines arrive.",
    )
    logs.add_argument("run_dir", help="the run directory: STORAGE_PATH/NAME")
    logs.add_argument("--rank", type=int, default=None, help="only this rank, unprefixed")
    logs.add_argument(
        "--follow",
        "-f",
        action="store_true",
        help="keep printing what is appended until the run has ended (or Ctrl-C)",
    )
    logs.set_defaults(func=_logs)
    plot = sub.add_parser(
        "plot", help="draw a run's reported metrics, restarts and failures as a PNG"
    )
    plot.add_argument("run_dir", help="the run directory: STORAGE_PATH/NAME")
    plot.add_argument(
        "--out", default=None, help="default: RUN_DIR/plot.png, or ./NAME.png for a URL"
    )
    plot.set_defaults(func=_plot)
    validate = sub.add_parser(
        "validate", help="check cluster YAML with Ray's own validator, then raytf's rules"
    )
    validate.add_argument("files", nargs="*", help="cluster-launcher YAML or KubeRay manifests")
    validate.add_argument(
        "--storage",
        help="a job's storage path or URL: not under a node's temp directory, no placeholder",
    )
    validate.add_argument(
        "--job-resources",
        help='one worker\'s resources as JSON, e.g. \'{"GPU": 1, "CPU": 8}\'; a pool must fit it',
    )
    validate.set_defaults(func=_validate)
    from raytf.tools.local.cli import add_parser as add_local

    add_local(sub)
    bench = sub.add_parser(
        "bench",
        help="benchmark raytf against hand-launched MWMS and Ray Train (raytf bench --help)",
        add_help=False,
    )
    bench.add_argument("args", nargs=argparse.REMAINDER, help="bench's own options (below)")
    bench.set_defaults(func=_bench)
    export = sub.add_parser("export", help="write a committed checkpoint as a Keras model file")
    export.add_argument("run_dir", help="the run directory: STORAGE_PATH/NAME")
    export.add_argument("--step", type=int, default=None, help="default: the latest checkpoint")
    export.add_argument(
        "--format",
        choices=("keras", "saved_model"),
        default="keras",
        help="a .keras file, or a TF SavedModel directory (for TF Serving)",
    )
    export.add_argument("--out", default=None, help="default: model.keras or saved_model/")
    export.set_defaults(func=_export)
    pool = sub.add_parser(
        "pool", help="keep processes with TensorFlow imported on every node, for warm starts"
    )
    pool.add_argument(
        "action",
        choices=("start", "stop", "list"),
        help="start: top every node up to --per-node; stop: end them all; "
        "list: one JSON line per kept process",
    )
    pool.add_argument("--per-node", type=int, default=2, help="processes kept on each node")
    pool.add_argument("--idle-s", type=float, default=600.0, help="each exits after this long")
    pool.set_defaults(func=_pool)
    version = sub.add_parser("version", help="print raytf's version")
    version.set_defaults(func=_version)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["bench"]:  # its own parser takes every option after the word
        return _bench(argparse.Namespace(args=argv[1:]))
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
