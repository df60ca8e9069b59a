"""The command line: parse the arguments, run one command, exit 0 (done, or every gate passed), 1 (a gate failed)
or 2 (an error, or a result a gate needs that is inconclusive)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from . import commands, submit
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
    login.set_defaults(handler=commands.login)

    send = sub.add_parser("submit", help="submit an experiment (the API's body as YAML or JSON); --wait for it")
    send.add_argument("file", help="the experiment file (.yaml, .yml or .json; - for stdin)")
    send.add_argument("--wait", action="store_true", help="follow the runs, then print the verdict table")
    submit.add_gate_arguments(send)
    _json_flag(send)
    send.set_defaults(handler=submit.submit)

    check = sub.add_parser("gate", help="the CI gate on an experiment: exit 0 pass, 1 fail, 2 error/inconclusive")
    check.add_argument("experiment", type=int)
    check.add_argument("--wait", action="store_true", help="wait for the experiment to end first")
    submit.add_gate_arguments(check)
    _json_flag(check)
    check.set_defaults(handler=submit.gate)

    state = sub.add_parser("status", help="the latest experiments, or one experiment's runs and verdicts")
    state.add_argument("experiment", nargs="?", type=int)
    state.add_argument("--status", choices=("queued", "running", "finished", "failed"))
    state.add_argument("--host")
    state.add_argument("--owner")
    _json_flag(state)
    state.set_defaults(handler=commands.status)

    runs = sub.add_parser("runs", help="runs, newest first")
    runs.add_argument("--experiment", type=int)
    runs.add_argument("--state", help="a run state, or active (not ended)")
    runs.add_argument("--host")
    runs.add_argument("--limit", type=int, default=50)
    _json_flag(runs)
    runs.set_defaults(handler=commands.runs)

    cancel = sub.add_parser("cancel", help="cancel a run (its server is torn down)")
    cancel.add_argument("run", type=int)
    _json_flag(cancel)
    cancel.set_defaults(handler=commands.cancel)

    export = sub.add_parser(
        "export",
        help="an experiment's comparison as CSV, every table as JSON, or in another tool's format "
        "(llm-d Benchmark Reports, bench_serving JSONL, MLflow or W&B runs)",
    )
    export.add_argument("experiment", type=int)
    export.add_argument("--format", choices=tuple(commands.EXPORT_FORMATS), default="csv")
    export.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    export.set_defaults(handler=commands.export)

    bring = sub.add_parser(
        "import", help="import result files (bench_serving JSONL, vllm bench serve JSON, SpecForge JSON) as runs"
    )
    bring.add_argument(
        "files", nargs="+", metavar="FILE", help="result files, a folder of them or a .zip/.tar.gz; - for stdin"
    )
    bring.add_argument("--experiment", type=int, help="import into this experiment (else a new one on --host)")
    bring.add_argument("--name", help="the new experiment's name (default: from the file names)")
    bring.add_argument("--host", help="the registered host a new experiment is filed under")
    bring.add_argument("--format", choices=commands.IMPORT_FORMATS, default="auto", help="the files' format")
    stated = bring.add_argument_group(
        "what the files do not say (every format; the file's own value wins, one that contradicts it is refused)"
    )
    stated.add_argument("--model", help="the served model's path")
    stated.add_argument("--engine", help="the engine that served it: sglang, vllm, tensorrt-llm, lmdeploy or other")
    stated.add_argument("--concurrency", type=int, help="the concurrency the client ran at")
    stated.add_argument("--tp-size", type=int, help="the server's tensor-parallel size")
    stated.add_argument("--speculative-algorithm", help="EAGLE3, EAGLE, NEXTN, ... or NONE")
    stated.add_argument("--draft-model", "--speculative-draft-model-path", dest="draft_model", help="the draft model")
    stated.add_argument("--num-steps", "--speculative-num-steps", dest="num_steps", type=int)
    stated.add_argument("--topk", "--speculative-eagle-topk", dest="topk", type=int)
    stated.add_argument("--num-draft-tokens", "--speculative-num-draft-tokens", dest="num_draft_tokens", type=int)
    _json_flag(bring)
    bring.set_defaults(handler=commands.import_files)

    logs = sub.add_parser("logs", help="a run's server log; -f follows it until the run ends")
    logs.add_argument("run", type=int)
    logs.add_argument("-f", "--follow", action="store_true")
    logs.add_argument("--after", type=int, default=0, help="start after this line number")
    logs.add_argument("--grep", help="only lines containing this text (case-insensitive)")
    logs.add_argument("-n", "--numbers", action="store_true", help="print line numbers")
    logs.add_argument("--poll", type=float, default=2.0, help="seconds between polls with -f (default 2)")
    _json_flag(logs)
    logs.set_defaults(handler=commands.logs)
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
        return int(args.handler(args))
    except (ApiError, CredentialsError) as exc:
        print(f"specdash: error: {exc}", file=sys.stderr)
        return ERROR
    except KeyboardInterrupt:
        print("specdash: interrupted", file=sys.stderr)
        return ERROR
