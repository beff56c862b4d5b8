"""The gpupolicy command line: the root parser, the command table, exit codes, the error boundary."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from enum import IntEnum
from typing import Protocol


class ExitCode(IntEnum):
    OK = 0
    FINDINGS = 1
    """Findings (validation errors, denials, failed tests) or drift (compile --check)."""
    BAD_INPUT = 2
    """Bad usage, or input that cannot be read or parsed."""


# name -> (module, one-line help).  Modules are imported only when their command runs (or its
# --help is asked for), so `gpupolicy --help` never pays for pydantic, flask or kubernetes.
COMMANDS: dict[str, tuple[str, str]] = {
    "validate": ("cli.commands.validate", "check cluster specs and report every finding"),
    "compile": ("cli.commands.compile", "compile a spec into a Kustomize tree (--check: detect drift)"),
    "explain": ("cli.commands.explain", "show per class what gets generated and the capacity it yields"),
    "plan": ("cli.commands.plan", "choose each class's sharing mode and sizing from measured workloads"),
    "admit": ("cli.commands.admit", "run the admission rules over application manifests"),
    "test": ("cli.commands.suite", "run table-driven admission test suites"),
    "schema": ("cli.commands.schema", "print or write the JSON Schemas of the spec and admission policy"),
    "webhook": ("cli.commands.webhook", "serve the admission webhook, or make development certificates"),
    "cluster": ("cli.commands.cluster", "compare a live cluster with a spec, draft a spec from it, or audit its "
                                        "running workloads"),
    "diff": ("cli.commands.diff", "show what a spec change does to capacity per class and tenant, nodes and workloads"),
}


class Command(Protocol):
    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...
    def run(self, args: argparse.Namespace) -> int: ...


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(ExitCode.BAD_INPUT, f"{self.prog}: error: {message}\n")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gpupolicy")
    except PackageNotFoundError:  # running from a source tree that is not installed
        return "0+unknown"


class _VersionAction(argparse.Action):
    """--version, looked up only when asked: importlib.metadata costs every other run ~15 ms."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS,
                 default: str = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        sys.stdout.write(f"gpupolicy {_version()}\n")  # stdout, as argparse's own "version" action prints
        parser.exit()


EXIT_CODES = "exit codes: 0 ok, 1 findings or drift, 2 bad input or usage"


def build_parser(selected: str | None) -> argparse.ArgumentParser:
    parser = _Parser(prog="gpupolicy", description="GPU-sharing policy compiler and admission webhook.",
                     epilog=EXIT_CODES)
    parser.add_argument("--version", action=_VersionAction, help="show program's version number and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, (module, help_text) in COMMANDS.items():
        cmd_parser = sub.add_parser(name, help=help_text, description=help_text, epilog=EXIT_CODES)
        if name == selected:
            command: Command = importlib.import_module(module)  # type: ignore[assignment]
            command.add_arguments(cmd_parser)
            cmd_parser.set_defaults(run=command.run, parser=cmd_parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: parse, run one command, turn every expected failure into a message and an exit code."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    selected = next((a for a in args_list if not a.startswith("-")), None)
    parser = build_parser(selected if selected in COMMANDS else None)
    try:
        args, extra = parser.parse_known_args(args_list)
        if extra:  # say it with the command's own usage line, not the root's
            getattr(args, "parser", parser).error(f"unrecognized arguments: {' '.join(extra)}")
    except SystemExit as exc:  # argparse's own --help/--version/usage exits
        return int(exc.code or 0)
    if getattr(args, "run", None) is None:
        parser.print_help(sys.stderr)
        return ExitCode.BAD_INPUT
    try:
        return int(args.run(args))
    except KeyboardInterrupt:
        print("gpupolicy: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return ExitCode.OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
