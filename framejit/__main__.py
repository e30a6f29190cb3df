"""framejit's command line: `python -m framejit <command>` (also installed as `framejit`).

Commands:
  demo   compile a small model, check it against eager, print graphs, guards and timings
  run    run a script in whole-script mode (not available yet: exits with status 2)

Exit status: 0 on success; 1 if the demo's result differs from eager; 2 for usage errors and
for commands that are not available yet.
"""

from __future__ import annotations

import argparse
import os
import sys

EXIT_UNAVAILABLE = 2


def _prog() -> str:
    name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return "framejit" if name in ("framejit", "framejit.exe") else "python -m framejit"


def build_parser() -> argparse.ArgumentParser:
    from framejit import __version__

    parser = argparse.ArgumentParser(
        prog=_prog(),
        description="framejit: a bytecode-level JIT compiler for PyTorch programs.",
        epilog="Run '%(prog)s <command> --help' for a command's options.",
    )
    parser.add_argument("--version", action="version", version=f"framejit {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="<command>", required=True)

    demo = commands.add_parser(
        "demo",
        help="compile a small model; check it against eager; print graphs, guards and timings",
        description="Compile a two-block transformer encoder with framejit.jit, check its "
        "output against eager, and print the captured graphs, the guards and an "
        "eager-vs-framejit timing table. Takes a few seconds on a CPU.",
    )
    demo.add_argument(
        "--backend", default="auto", help="framejit backend to compile with (default: auto)"
    )
    demo.add_argument(
        "--all-guards", action="store_true", help="list every guard (default: the first few)"
    )
    demo.add_argument(
        "--rounds",
        type=int,
        default=15,
        help="timed rounds per implementation; the median is shown (default: 15)",
    )
    demo.set_defaults(subparser=demo)

    run = commands.add_parser(
        "run",
        help="run a script in whole-script mode (not available yet)",
        description="Run SCRIPT with framejit's frame hook installed, as FRAMEJIT=1 would. "
        "Not available yet: the PEP 523 frame hook is not built.",
    )
    run.add_argument("script", help="the Python script to run")
    run.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the script")
    return parser


def _demo(args: argparse.Namespace) -> int:
    from framejit.backend import list_backends

    parser = args.subparser
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if args.backend not in list_backends():
        parser.error(
            f"unknown backend {args.backend!r}; registered backends: {', '.join(list_backends())}"
        )
    from framejit.demo import run_demo

    return run_demo(backend=args.backend, all_guards=args.all_guards, rounds=args.rounds)


def _run(args: argparse.Namespace) -> int:
    print(
        f"framejit: whole-script mode is not available yet, so '{_prog()} run {args.script}' "
        "cannot run it.\n"
        "The PEP 523 frame hook it needs is not built in this version. Meanwhile, wrap the "
        "functions or modules to compile with framejit.jit(...) and run the script with python.",
        file=sys.stderr,
    )
    return EXIT_UNAVAILABLE


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "demo":
        return _demo(args)
    if args.command == "run":
        return _run(args)
    parser.error(f"unknown command {args.command!r}")  # unreachable: argparse checks choices
    return EXIT_UNAVAILABLE


if __name__ == "__main__":
    sys.exit(main())
