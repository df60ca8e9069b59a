"""Running the `specdash` command in a test: in process against the Django app (httpx's WSGI transport, the test
database, no server), or as a subprocess against the live server of the end-to-end tests."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from experiments.cli import client
from experiments.cli.main import main

REPO = Path(__file__).resolve().parents[2]
# Plain http to this machine, as the client allows it (any other http URL is refused before a request).
IN_PROCESS_URL = "http://localhost"


@dataclass
class Result:
    code: int
    out: str
    err: str


@pytest.fixture
def cli_home(tmp_path, monkeypatch) -> Path:
    """A config directory of the test's own; no SPECDASH_* from the environment."""
    home = tmp_path / "config"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home))
    monkeypatch.delenv("SPECDASH_URL", raising=False)
    monkeypatch.delenv("SPECDASH_TOKEN", raising=False)
    return home


@pytest.fixture
def cli(cli_home, monkeypatch):
    """`cli("status", "--json", stdin="...")` -> Result: the command run in process against the app."""
    from django.core.signals import request_finished, request_started
    from django.core.wsgi import get_wsgi_application
    from django.db import close_old_connections

    # As Django's test client does: the request must not close the test's database connection (its transaction).
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    monkeypatch.setattr(client, "DEFAULT_TRANSPORT", httpx.WSGITransport(app=get_wsgi_application()))

    def run(*argv: str, stdin: str = "") -> Result:
        out, err = io.StringIO(), io.StringIO()
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
        with redirect_stdout(out), redirect_stderr(err):
            try:
                code = main(list(argv))
            except SystemExit as exc:  # argparse's usage errors
                code = int(exc.code or 0)
        return Result(code, out.getvalue(), err.getvalue())

    yield run
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


def run_cli_process(*argv: str, url: str, token: str, cwd: Path, timeout: float = 120) -> Result:
    """The command as CI runs it: `python -m experiments.cli`, credentials from the environment."""
    env = {**os.environ, "SPECDASH_URL": url, "SPECDASH_TOKEN": token, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "experiments.cli", *argv],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=timeout,
    )
    return Result(done.returncode, done.stdout, done.stderr)
