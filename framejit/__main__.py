"""framejit's command line: `python -m framejit <command>` (also installed as `framejit`).

Commands:
  demo   compile a small model, check it against eager, print graphs, guards and timings
  run    run a script in whole-script mode (the frame hook on; like FRAMEJIT=1)

Exit status: 0 on success; 1 if the demo's result differs from eager; 2 for usage errors and
when whole-script mode cannot start (the frame hook is not built for this Python); `run` exits
with the script's own status otherwise.
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
        "--backend",
        default="eager",
        help="framejit backend to compile with (default: eager, the fastest on a CPU: the AOT "
        "stage of aot_eager/auto runs decomposed aten graphs op by op until Triton compiles them)",
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
        help="run a script in whole-script mode (every function frame considered)",
        description="Run SCRIPT as __main__ with framejit's frame hook on for every thread, as "
        "FRAMEJIT=1 would: functions that do tensor work are compiled, others run as usual.",
    )
    run.add_argument("--backend", default=None, help="backend for compiled frames (default: auto)")
    run.add_argument("--mode", default=None, help="mode for compiled frames (default: none)")
    run.add_argument("script", help="the Python script to run")
    # (main() hands everything after the script to it untouched, a first `--` included)
    run.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the script")
    run.set_defaults(subparser=run)
    return parser


_RUN_OPTIONS_WITH_VALUE = ("--backend", "--mode")


def _split_script_args(argv: list[str]) -> tuple[list[str], list[str]]:
    """For `run`: (framejit's own arguments up to the script, the script's arguments). The
    script's are passed on exactly as given, as python passes them (argparse would drop a
    first `--`)."""
    try:
        at = next(i for i, a in enumerate(argv) if not a.startswith("-"))
    except StopIteration:
        return argv, []
    if argv[at] != "run":
        return argv, []
    i = at + 1
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            i += 1
            break
        if arg in _RUN_OPTIONS_WITH_VALUE:
            i += 2
            continue
        if not arg.startswith("-") or arg == "-":
            break
        i += 1  # --backend=B, -h, or an unknown option argparse will report
    return argv[: i + 1], argv[i + 1 :]


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
    from framejit.api import MODES
    from framejit.backend import list_backends
    from framejit.config import config
    from framejit.frontend import hook
    from framejit.wholescript import run_script, script_traceback

    parser = args.subparser
    if args.backend is not None and args.backend not in list_backends():
        parser.error(
            f"unknown backend {args.backend!r}; registered backends: {', '.join(list_backends())}"
        )
    if args.mode is not None and args.mode not in MODES:
        modes = ", ".join(m for m in MODES if m is not None)
        parser.error(f"unknown mode {args.mode!r}; expected one of {modes}")
    if not os.path.isfile(args.script):
        print(f"framejit: no such script: {args.script}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    if not config.disable and not hook.available():
        print(
            f"framejit: whole-script mode cannot run {args.script}: {hook.unavailable_reason()}",
            file=sys.stderr,
        )
        return EXIT_UNAVAILABLE
    try:
        run_script(args.script, args.args, backend=args.backend, mode=args.mode)
    except SystemExit as exc:
        code = exc.code
        if code is None or isinstance(code, int):
            return code or 0
        print(code, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # uncaught in the script: reported as python reports it
        tb = script_traceback(exc.__traceback__, args.script)
        sys.excepthook(type(exc), exc.with_traceback(tb), tb)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    own, script_args = _split_script_args(argv)
    args = parser.parse_args(own)
    if args.command == "run":
        args.args = [*args.args, *script_args]
    if args.command == "demo":
        return _demo(args)
    if args.command == "run":
        return _run(args)
    parser.error(f"unknown command {args.command!r}")  # unreachable: argparse checks choices
    return EXIT_UNAVAILABLE


if __name__ == "__main__":
    sys.exit(main())
