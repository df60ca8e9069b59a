"""The commands that read or change one thing: login, status, runs, cancel, export, import, logs."""

from __future__ import annotations

import argparse
import getpass
import json
import sys
import time
from urllib.parse import urlsplit

from . import credentials, imports
from .client import Api, ApiError, segment
from .output import emit_json, safe, table, verdict_table

LOG_PAGE = 1000
MIN_POLL_S = 0.2
IMPORT_FORMATS = ("auto", "sglang-bench-serving", "vllm-bench-serve", "specforge-benchmark", "vllm-bench-sweep",
                  "specforge-bench-eagle3", "guidellm-report", "genai-bench-run")  # fmt: skip
import_files = imports.import_files  # the import command lives in imports.py (files, folders, archives)


def connect() -> Api:
    return Api(credentials.load())


def login(args: argparse.Namespace) -> int:
    url = credentials.normalize_url(args.url)
    token = args.token
    if token is None:
        token = getpass.getpass("API token: ") if sys.stdin.isatty() else sys.stdin.readline()
    token = credentials.check_token(token)
    with Api(credentials.Credentials(url, token, "login")) as api:
        me = api.get("/me")
    path = credentials.save(url, token)
    if args.json:
        emit_json({"url": url, "username": me["username"], "role": me["role"], "credentials": str(path)})
        return 0
    print(f"Logged in to {url} as {safe(me['username'])} ({me['role'] or 'no role'}); credentials in {path}")
    if not me["role"]:
        print("Your user has no role yet: every other call will be refused (403) until an admin gives you one.")
    if url.startswith("http://") and not credentials.is_loopback(urlsplit(url).hostname or ""):
        # Only with SPECDASH_ALLOW_HTTP=1 (credentials.check_transport refuses it otherwise).
        print("Warning: the URL is plain http: the token crosses the network unencrypted.", file=sys.stderr)
    return 0


def status(args: argparse.Namespace) -> int:
    with connect() as api:
        if args.experiment is not None:
            experiment = api.get(f"/experiments/{segment(args.experiment)}")
            if args.json:
                emit_json(experiment)
            else:
                print(experiment_summary(api, experiment))
            return 0
        params = {k: v for k, v in (("status", args.status), ("host", args.host), ("owner", args.owner)) if v}
        listing = api.get("/experiments", **params)
    if args.json:
        emit_json(listing)
        return 0
    rows = [
        (e["id"], e["name"], e["host"], e["owner"] or "", e["status"], _best(e["best"]), ", ".join(e["candidates"]))
        for e in listing["experiments"]
    ]
    print(table(("id", "name", "host", "owner", "status", "best", "candidates"), rows))
    if listing["pages"] > 1:
        print(f"(the latest {len(rows)} of {listing['count']})")
    return 0


def _best(best: dict | None) -> str:
    return (
        "" if best is None else f"{best['candidate']} c={best['concurrency']} {best['speedup']:.3f}x {best['verdict']}"
    )


def experiment_summary(api: Api, experiment: dict) -> str:
    runs = [
        (r["id"], r["config"], r["launch_index"] + 1, r["state"], (r["failure"] or {}).get("kind", ""))
        for r in experiment["runs"]
    ]
    parts = [
        f"Experiment {experiment['id']} {safe(experiment['name'])!s} on {safe(experiment['host'])}: "
        f"{experiment['status']}",
        api.page_url(experiment["url"]),
        "",
        table(("run", "config", "launch", "state", "failure"), runs),
        "",
        verdict_table(experiment),
    ]
    if experiment.get("headline"):
        parts += ["", safe(experiment["headline"])]
    return "\n".join(parts)


def runs(args: argparse.Namespace) -> int:
    params = {"experiment": args.experiment, "state": args.state, "host": args.host, "limit": args.limit}
    with connect() as api:
        rows = api.get("/runs", **{k: v for k, v in params.items() if v not in (None, "")})
    if args.json:
        emit_json(rows)
        return 0
    headings = ("run", "experiment", "config", "host", "launch", "state", "failure", "started")
    cells = ("id", "experiment", "config", "host", "launch_index", "state", "failure_kind", "started_at")
    print(table(headings, [[_cell(r, c) for c in cells] for r in rows]))
    return 0


def _cell(run: dict, column: str) -> object:
    """A run's column as a person reads it: launches counted from 1, as on the pages (the JSON keeps the index)."""
    if column == "launch_index":
        return run[column] + 1
    if column == "started_at":
        return (run[column] or "")[:19]
    return run[column]


def cancel(args: argparse.Namespace) -> int:
    with connect() as api:
        result = api.post(f"/runs/{segment(args.run)}/cancel")
    if args.json:
        emit_json(result)
    elif result["accepted"]:
        print(f"Run {result['id']}: cancel requested (it was {result['state']}).")
    else:
        print(f"Run {result['id']} has already ended ({result['state']}): nothing to cancel.", file=sys.stderr)
    return 0 if result["accepted"] else 2


# `--format` -> the download's name after `export.` (the API's /experiments/{id}/export.<kind>).
EXPORT_FORMATS = {
    "csv": "csv",
    "json": "json",
    "llm-d": "llm-d.json",
    "bench-serving": "bench-serving.jsonl",
    "mlflow": "mlflow.json",
    "wandb": "wandb.json",
}


def export(args: argparse.Namespace) -> int:
    with connect() as api:
        text = api.get_text(f"/experiments/{segment(args.experiment)}/export.{EXPORT_FORMATS[args.format]}")
    if args.output:
        with open(args.output, "w", encoding="utf-8", newline="") as file:
            file.write(text)
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return 0


def logs(args: argparse.Namespace) -> int:
    """The run's stored log from line `--after`; with `-f`, polling for new lines until the run has ended and every
    line is read (the API's `after` cursor: nothing is printed twice or skipped)."""
    cursor, poll = args.after, max(args.poll, MIN_POLL_S)
    with connect() as api:
        while True:
            params = {"after": cursor, "limit": LOG_PAGE, **({"q": args.grep} if args.grep else {})}
            page = api.get(f"/runs/{segment(args.run)}/log", **params)
            for line in page["lines"]:
                if args.json:
                    print(_json_line(line))
                else:
                    print(f"{line['n']:>6}  {safe(line['text'])}" if args.numbers else safe(line["text"]))
            sys.stdout.flush()
            cursor = page["next"]
            if len(page["lines"]) == LOG_PAGE:
                continue  # more is stored already
            if not args.follow or page["finished"]:
                return 0
            time.sleep(poll)


def _json_line(line: dict) -> str:
    return json.dumps({"n": line["n"], "text": line["text"]})


__all__ = ["ApiError", "cancel", "connect", "export", "import_files", "login", "logs", "runs", "status"]
