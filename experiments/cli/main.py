"""The command line: parse the arguments, run one command, exit 0 (done, or every gate passed), 1 (a gate failed)
or 2 (an error, or a result a gate needs that is inconclusive)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

VERSION = "0.1.0"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specdash", description="specdash from the terminal and from CI.")
    parser.add_argument("--version", action="version", version=f"specdash {VERSION}")
    parser.add_subparsers(dest="command", metavar="COMMAND")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    return 0
