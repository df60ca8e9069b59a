"""The `specdash` command installs and imports without the server: no Django on a laptop or a CI runner."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CLI_DIR = REPO / "experiments" / "cli"

# Run isolated (-I: no PYTHONPATH, no user site, not even the current directory on the path), with the server's
# frameworks made unimportable: any import of one fails, and none may be loaded after importing every CLI module.
GUARD = """
import importlib, pkgutil, sys
sys.path.insert(0, {repo!r})
BLOCKED = ("django", "ninja", "celery", "channels", "daphne", "asgiref", "psycopg")
for name in BLOCKED:
    sys.modules[name] = None
import experiments.cli
for info in pkgutil.iter_modules(experiments.cli.__path__):
    if info.name != "__main__":
        importlib.import_module("experiments.cli." + info.name)
from experiments.cli.main import main
try:
    main(["--version"])
except SystemExit as exc:
    assert exc.code == 0, exc.code
loaded = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED and sys.modules[m] is not None)
server = sorted(m for m in sys.modules if m.startswith("experiments.") and not m.startswith("experiments.cli"))
assert not loaded and not server, (loaded, server)
print("ok", len([m for m in sys.modules if m.startswith("experiments.cli")]))
"""


def test_it_imports_every_cli_module_with_django_unimportable():
    result = subprocess.run(
        [sys.executable, "-I", "-c", GUARD.format(repo=str(REPO))], capture_output=True, text=True, timeout=60
    )

    assert result.returncode == 0, result.stderr
    last = result.stdout.splitlines()[-1]
    assert last.startswith("ok ")
    assert int(last.split()[1]) >= len([p for p in CLI_DIR.glob("*.py") if p.name != "__main__.py"])


def test_it_declares_the_console_script_and_only_the_clients_dependencies():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())

    assert project["project"]["scripts"] == {"specdash": "experiments.cli.main:main"}
    names = sorted(d.split(">")[0].split("=")[0].split("<")[0] for d in project["project"]["dependencies"])
    assert names == ["PyYAML", "httpx"]
    assert project["tool"]["setuptools"]["packages"] == ["experiments.cli"]  # the client alone
    # The pins the suite runs with are requirements.txt's.
    pinned = set((REPO / "requirements.txt").read_text().split())
    assert set(project["project"]["optional-dependencies"]["pinned"]) <= pinned


def test_it_runs_as_a_module():
    result = subprocess.run(
        [sys.executable, "-m", "experiments.cli", "--version"], capture_output=True, text=True, cwd=REPO, timeout=60
    )

    assert result.returncode == 0 and result.stdout.strip().startswith("specdash ")
