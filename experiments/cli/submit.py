"""Submitting an experiment from a YAML or JSON file, waiting for it with a progress line per run, and the gate
(`submit --wait --fail-on ...`, `gate EXPERIMENT --fail-on ...`) with its JUnit and Markdown files."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from . import gates as gate_rules
from .client import Api, ApiError, segment
from .commands import connect
from .output import emit_json, safe, verdict_table
from .reports import junit_xml, markdown_summary

MAX_FILE_BYTES = 2 * 1024 * 1024  # the API's request body limit is 2.5 MB
MIN_POLL_S = 0.2
ENDED = ("finished", "failed")


class InputError(ApiError):
    """A file the client refuses before anything is sent (exit 2, like an API error)."""


def read_experiment(path: str) -> dict[str, Any]:
    """The API's experiment body from a YAML or JSON file (`-`: stdin). YAML is read safely (no tags that build
    objects); JSON is YAML too, but a `.json` file is read as JSON for its exact error messages."""
    if path == "-":
        text = sys.stdin.read(MAX_FILE_BYTES + 1)
    else:
        file = Path(path)
        if not file.is_file():
            raise InputError(f"{path}: no such file")
        if file.stat().st_size > MAX_FILE_BYTES:
            raise InputError(f"{path}: larger than {MAX_FILE_BYTES // 1024 // 1024} MB")
        text = file.read_text(encoding="utf-8")
    if len(text) > MAX_FILE_BYTES:
        raise InputError(f"{path}: larger than {MAX_FILE_BYTES // 1024 // 1024} MB")
    try:
        body = json.loads(text) if path.endswith(".json") else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise InputError(f"{path}: not valid {'JSON' if path.endswith('.json') else 'YAML'}: {exc}") from None
    if not isinstance(body, dict):
        raise InputError(f"{path}: an experiment is a mapping (name, host, baseline, candidates, profile, ...)")
    return body


def add_gate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--fail-on", metavar="GATES", type=_gates_argument,
                        help="regression,outputs-differ,slower,slo,accept-drop:2%% (exit 1 if one fails)")  # fmt: skip
    parser.add_argument("--against", metavar="EXPERIMENT", type=int,
                        help="accept-drop's reference: this experiment (default: each series' last value)")  # fmt: skip
    parser.add_argument("--allow-inconclusive", action="store_true",
                        help="an inconclusive check passes (skipped in JUnit) instead of exiting 2")  # fmt: skip
    parser.add_argument("--junit", metavar="FILE", help="write the checks as JUnit XML")
    parser.add_argument("--markdown", metavar="FILE", help="write a Markdown summary (CI step summary, PR comment)")
    parser.add_argument("--timeout", type=float, default=6 * 3600.0, help="seconds to wait at most (default 6 h)")
    parser.add_argument("--poll", type=float, default=5.0, help="seconds between polls (default 5)")


def _gates_argument(text: str) -> list[gate_rules.Gate]:
    try:
        return gate_rules.parse_fail_on(text)
    except gate_rules.GateSpecError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def submit(args: argparse.Namespace) -> int:
    body = read_experiment(args.file)
    with connect() as api:
        created = api.post("/experiments", body)
        if not args.json:
            print(f"Experiment {created['id']} submitted: {api.page_url(created['url'])}")
            for run in created["runs"]:
                print(f"  run {run['id']} {safe(run['config'])}: {run['state']}")
            sys.stdout.flush()  # a CI log (a pipe) shows the run ids while the experiment runs
        for warning in created.get("warnings") or []:
            print(f"warning: {safe(warning)}", file=sys.stderr)
        if not (args.wait or args.fail_on):
            if args.json:
                emit_json(created)
            return 0
        return _finish(api, created["id"], args)


def gate(args: argparse.Namespace) -> int:
    if not args.fail_on:
        raise InputError("name the gates: --fail-on regression,outputs-differ,slower,accept-drop:2%")
    with connect() as api:
        return _finish(api, args.experiment, args)


def _finish(api: Api, experiment_id: int | str, args: argparse.Namespace) -> int:
    # `submit --fail-on` waits for the verdicts it gates; `gate` reads the experiment as it is unless told to wait.
    wait = args.wait or (args.command == "submit" and args.fail_on)
    experiment = wait_for(api, experiment_id, args) if wait else api.get(f"/experiments/{segment(experiment_id)}")
    if not args.fail_on:
        if args.json:
            emit_json({"experiment": experiment})
        else:
            _print_result(api, experiment)
        return 0 if experiment["status"] == "finished" else 2
    against = api.get(f"/experiments/{args.against}") if args.against is not None else None
    checks = gate_rules.evaluate(experiment, args.fail_on, against)
    code = gate_rules.exit_code(checks, allow_inconclusive=args.allow_inconclusive)
    page = api.page_url(experiment["url"])
    if args.junit:
        Path(args.junit).write_bytes(
            junit_xml(experiment, checks, page_url=page, allow_inconclusive=args.allow_inconclusive)
        )
    if args.markdown:
        Path(args.markdown).write_text(
            markdown_summary(experiment, checks, code=code, link=api.page_url), encoding="utf-8"
        )
    if args.json:
        emit_json({"experiment": experiment, "exit": code, "checks": [_check_json(c) for c in checks]})
        return code
    _print_result(api, experiment)
    print()
    for check in checks:
        print(f"{check.outcome.upper():<12} {safe(check.gate)} {safe(check.name)}: {safe(check.message)}")
    outcome = {0: "every gate passed", 1: "a gate failed", 2: "inconclusive or an error: the gate cannot decide"}
    print(f"\nspecdash gate: {outcome[code]} (exit {code})")
    return code


def _check_json(check: gate_rules.Check) -> dict[str, Any]:
    return {"gate": check.gate, "config": check.candidate, "concurrency": check.concurrency,
            "outcome": check.outcome, "message": check.message, "numbers": check.numbers}  # fmt: skip


def _print_result(api: Api, experiment: dict[str, Any]) -> None:
    print(f"Experiment {experiment['id']} {safe(experiment['name'])}: {experiment['status']}")
    print(api.page_url(experiment["url"]))
    if experiment.get("headline"):
        print(safe(experiment["headline"]))
    print()
    print(verdict_table(experiment))


def wait_for(api: Api, experiment_id: int | str, args: argparse.Namespace) -> dict[str, Any]:
    """Poll the experiment until it has finished or failed, printing (to stderr) a line each time a run's state,
    loading percentage (by tens) or benchmark cell changes. A timeout is an error (exit 2)."""
    deadline = time.monotonic() + args.timeout
    seen: dict[int, tuple[Any, ...]] = {}
    poll = max(args.poll, MIN_POLL_S)
    while True:
        experiment = api.get(f"/experiments/{segment(experiment_id)}")
        for run in experiment["runs"]:
            progress = run.get("loading_progress")
            key = (run["state"], None if progress is None else progress // 10, run.get("benchmark_cell"))
            if seen.get(run["id"]) != key:
                seen[run["id"]] = key
                print(_progress_line(run), file=sys.stderr, flush=True)
        if experiment["status"] in ENDED:
            return experiment
        if time.monotonic() > deadline:
            raise ApiError(f"experiment {experiment['id']} is still {experiment['status']} after {args.timeout:g} s")
        time.sleep(poll)


def _progress_line(run: dict[str, Any]) -> str:
    # Launches are counted from 1 wherever a person reads them (the pages too); `launch_index` stays 0-based in JSON.
    line = f"run {run['id']} {safe(run['config'])} (launch {run['launch_index'] + 1}): {run['state']}"
    if run["state"] == "loading" and run.get("loading_progress") is not None:
        line += f" {run['loading_progress']}%"
    if run["state"] == "benchmarking":
        progress = run.get("benchmark_progress")  # from servers that report it: "c=4 · pass 2/3 · 61%"
        line += f", {safe(progress['label'])}" if progress else f", cell {run.get('benchmark_cell', 0) + 1}"
    if run.get("failure"):
        line += f" ({safe(run['failure'].get('kind'))}: {safe(run['failure'].get('message'))[:200]})"
    return line
