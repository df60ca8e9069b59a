"""The command line: parse the arguments, run one command, exit 0 (done, or every gate passed), 1 (a gate failed)
or 2 (an error, or a result a gate needs that is inconclusive)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from . import commands
from .client import ApiError
from .credentials import CredentialsError

VERSION = "0.1.0"
OK, GATE_FAILED, ERROR = 0, 1, 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specdash", description="specdash from the terminal and from CI.")
    parser.add_argument("--version", action="version", version=f"specdash {VERSION}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    login = sub.add_parser("login", help="check a token against a server and store both (owner-only file)")
    login.add_argument("url", help="the server, e.g. https://specdash.example.com")
    login.add_argument("--token", help="the API token (else read from stdin, or asked for without echo)")
    _json_flag(login)
    login.set_defaults(run=commands.login)
    return parser


def _json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON for scripts instead of text")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return ERROR
    try:
        return int(args.run(args))
    except (ApiError, CredentialsError) as exc:
        print(f"specdash: error: {exc}", file=sys.stderr)
        return ERROR
    except KeyboardInterrupt:
        print("specdash: interrupted", file=sys.stderr)
        return ERROR
