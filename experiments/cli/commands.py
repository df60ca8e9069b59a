"""The commands that read or change one thing: login, status, runs, cancel, export, logs."""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from typing import Any
from urllib.parse import urlsplit

from . import credentials
from .client import Api


def emit_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, sort_keys=False)
    sys.stdout.write("\n")


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
    print(f"Logged in to {url} as {me['username']} ({me['role'] or 'no role'}); credentials in {path}")
    if not me["role"]:
        print("Your user has no role yet: every other call will be refused (403) until an admin gives you one.")
    if url.startswith("http://") and not _is_loopback(url):
        print("Warning: the URL is plain http: the token crosses the network unencrypted.", file=sys.stderr)
    return 0


def _is_loopback(url: str) -> bool:
    return (urlsplit(url).hostname or "") in ("localhost", "127.0.0.1", "::1")
