"""The `fxopt` command line: its parser and entry point, and the `passes` and `models` listings.

`fxopt optimize MODEL` walks the user's path of the design (trace, transform, verify, run) and
reports every step, because a user deciding whether to trust a graph optimizer needs to see
what it changed, what it refused to change and why, whether outputs still match, and whether
it is faster. Bad input ends in one line on stderr and exit code 1 (2 for bad usage); `--debug`
shows the traceback instead. `optimize.py` runs that command.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

import torch
from rich.console import Console
from rich.table import Table

from ..optimization import presets
from . import models
from .errors import one_line
from .optimize import DEFAULT_BATCH, DEFAULT_SEQ, DTYPES, cmd_optimize


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr like every other fxopt error."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"fxopt: error: {message} (see {self.prog} --help)\n")


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `fxopt` console script and of `python -m fxopt`."""
    args = build_parser().parse_args(argv)
    console = Console(width=None if sys.stdout.isatty() else 160)
    errors = sys.stderr
    try:
        with contextlib.ExitStack() as quiet:
            if not args.debug:
                quiet.enter_context(_library_output_hidden())
            return int(args.command(args, console))
    except KeyboardInterrupt:
        print("fxopt: interrupted", file=errors)
        return 130
    except Exception as exc:  # every failure becomes one line unless --debug asks for the traceback
        if args.debug:
            raise
        print(f"fxopt: error: {one_line(exc)}", file=errors)
        return 1


@contextmanager
def _library_output_hidden() -> Iterator[None]:
    """Silence what torch and transformers write to stderr (warnings, logs, graph dumps).

    The CLI reports what matters itself (trace fallbacks as notes, failures as one line); the
    libraries' own output stays available with --debug.
    """
    with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        torch._logging.set_logs(all=logging.ERROR)
        yield


def build_parser() -> argparse.ArgumentParser:
    debug_help = "show tracebacks and library warnings"
    parser = _Parser(prog="fxopt", description="A torch.fx graph optimizer with a C++ engine.")
    parser.add_argument("--debug", action="store_true", help=debug_help)
    # Accepted after the command too; SUPPRESS keeps a subcommand from resetting `fxopt --debug`.
    common = _Parser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=debug_help)
    commands = parser.add_subparsers(title="commands", required=True, parser_class=_Parser)

    optimize = commands.add_parser(
        "optimize", parents=[common], help="trace, transform, verify and time a model"
    )
    optimize.add_argument(
        "model",
        help=f"bundled name ({', '.join(models.BUNDLED)}), config JSON, model directory or file.py:factory",
    )
    chosen = optimize.add_mutually_exclusive_group()
    chosen.add_argument(
        "--passes",
        help="comma-separated passes with optional arguments, e.g. MergeLinears,FuseBatchNormInConv",
    )
    chosen.add_argument(
        "--preset",
        default="default",
        help=f"named pass list: {', '.join(presets.PRESETS)} (default: default)",
    )
    optimize.add_argument(
        "--mode",
        choices=("auto", "symbolic", "sized", "dynamo", "export"),
        default="auto",
        help="tracer (default: auto)",
    )
    # None when not given, so a factory that brings its own inputs can say they were ignored.
    optimize.add_argument("--batch", type=_positive, help=f"batch size of the inputs (default: {DEFAULT_BATCH})")
    optimize.add_argument(
        "--seq", type=_positive, help=f"sequence length of token inputs (default: {DEFAULT_SEQ})"
    )
    optimize.add_argument("--dtype", choices=tuple(DTYPES), default="float32", help="model and input dtype")
    optimize.add_argument("--verify", action="store_true", help="compare outputs with the eager model")
    optimize.add_argument("--rtol", type=float, help="relative tolerance for --verify (default: per dtype)")
    optimize.add_argument("--atol", type=float, help="absolute tolerance for --verify (default: per dtype)")
    optimize.add_argument("--bench", action="store_true", help="time eager against optimized")
    optimize.add_argument(
        "--repeats", type=_positive, default=20, help="timed runs per model for --bench (default: 20)"
    )
    optimize.add_argument("--warmup", type=_count, default=3, help="untimed runs before timing (default: 3)")
    optimize.add_argument(
        "--save",
        type=Path,
        help="write the optimized model, checked to load in a fresh process: FILE.pt2 is an "
        "ExportedProgram (torch.export.load, torch alone); FILE.pt (any other extension) an fxopt "
        "graph file (fxopt.load, reversible)",
    )
    optimize.add_argument("--json", type=Path, help="write everything shown as JSON")
    optimize.set_defaults(command=cmd_optimize)

    passes = commands.add_parser("passes", parents=[common], help="list the transformations and presets")
    passes.set_defaults(command=cmd_passes)
    listed = commands.add_parser("models", parents=[common], help="list the bundled models")
    listed.set_defaults(command=cmd_models)
    return parser


def _positive(text: str) -> int:
    return _at_least(text, 1)


def _count(text: str) -> int:
    return _at_least(text, 0)


def _at_least(text: str, minimum: int) -> int:
    value = int(text)
    if value < minimum:
        raise argparse.ArgumentTypeError(f"must be at least {minimum}, not {value}")
    return value


# --- fxopt passes / fxopt models -----------------------------------------------------------


def cmd_passes(args: argparse.Namespace, console: Console) -> int:
    table = Table(title="transformations")
    for column in ("name", "engine", "what it does", "reversible", "preserving", "dialects"):
        table.add_column(column)
    for info in presets.catalog():
        name = f"{info.name}({', '.join(info.parameters)})" if info.parameters else info.name
        table.add_row(
            name, info.engine, info.summary, _yes(info.reversible), _yes(info.preserving), info.dialects
        )
    console.print(table)
    preset_table = Table(title="presets (--preset NAME)")
    for column in ("preset", "passes", "why"):
        preset_table.add_column(column)
    for preset in presets.PRESETS.values():
        preset_table.add_row(preset.name, ", ".join(presets.preset_passes(preset.name)), preset.description)
    console.print(preset_table)
    return 0


def cmd_models(args: argparse.Namespace, console: Console) -> int:
    table = Table(title="bundled models (or pass a config JSON, a model directory, or file.py:factory)")
    table.add_column("name")
    table.add_column("model")
    for name, bundled in models.BUNDLED.items():
        table.add_row(name, bundled.description)
    console.print(table)
    return 0


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"
