"""The ``raytf`` command. Sub-commands grow with the project; each is a small function."""

from __future__ import annotations

import argparse
import json
import sys

from raytf.run_state import STATE_FILE, read_state


def _status(args: argparse.Namespace) -> int:
    try:
        doc = read_state(args.run_dir)
    except FileNotFoundError:
        print(
            f"raytf status: no {STATE_FILE} in {args.run_dir}: not a raytf run directory",
            file=sys.stderr,
        )
        return 2
    print(json.dumps(doc, indent=2, sort_keys=True))
    return 0


def _version(_: argparse.Namespace) -> int:
    from raytf import __version__

    print(__version__)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="raytf", description="Ray cluster trainer for TensorFlow")
    sub = parser.add_subparsers(dest="command", required=True)
    status = sub.add_parser("status", help="print a run's state as JSON")
    status.add_argument("run_dir", help="the run directory: STORAGE_PATH/NAME")
    status.set_defaults(func=_status)
    version = sub.add_parser("version", help="print raytf's version")
    version.set_defaults(func=_version)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
