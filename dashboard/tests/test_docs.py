"""The README and docs/ stay true: every command, page, API endpoint, file, setting and link they name exists.

A renamed URL, a dropped make target or a moved module otherwise leaves the docs promising what is gone; these
checks read the docs the way a newcomer would and try each thing they name.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.core.management import get_commands
from django.urls import Resolver404, resolve

from experiments.cli.main import build_parser

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# Paths the docs name on a GPU host or its SGLang server, not on specdash.
HOST_PATHS = ("/etc/", "/proc/", "/dev/", "/tmp/", "/usr/", "/var/", "/opt/", "/home/", "/root/")
SERVER_ENDPOINTS = {"/health", "/health_generate", "/metrics", "/start_profile", "/stop_profile", "/get_server_info"}
TOP_LEVEL = ("dashboard/", "experiments/", "workers/", "simhost/", "templates/", "static/", "bench/", "docs/", ".ci/")


def _text() -> str:
    return "\n".join(path.read_text() for path in DOCS)


def _code(pattern: str) -> set[str]:
    """What the docs name in `code spans` matching `pattern` (its first group)."""
    return {match.group(1) for match in re.finditer(pattern, _text())}


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to dashes."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_the_readme_is_a_screen_or_two_and_links_every_doc():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 120
    assert "make demo" in readme and "make test" in readme
    for doc in DOCS[1:]:
        assert f"(docs/{doc.name})" in readme, f"README does not link {doc.name}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda path: path.name)
def test_every_relative_link_and_anchor_exists(doc: Path):
    for target in re.findall(r"\]\(([^)\s]+)\)", doc.read_text()):
        if re.match(r"[a-z]+:", target):
            continue  # an absolute URL
        file_part, _, anchor = target.partition("#")
        linked = (doc.parent / file_part).resolve() if file_part else doc
        assert linked.exists(), f"{doc.name} links {target}, which does not exist"
        if anchor:
            headings = re.findall(r"^#+ (.+)$", linked.read_text(), flags=re.MULTILINE)
            assert anchor in {_slug(h) for h in headings}, f"{doc.name} links {target}: no such heading"


def test_every_make_target_named_exists():
    makefile = (REPO / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z][\w-]*):", makefile, flags=re.MULTILINE))
    named = set(re.findall(r"\bmake ([a-z][\w-]*)", _text()))
    assert named and named <= targets, f"not in the Makefile: {sorted(named - targets)}"


def test_every_management_command_named_exists():
    named = _code(r"`(?:python )?manage\.py ([a-z_]+)")
    assert named and named <= set(get_commands()), f"no such command: {sorted(named - set(get_commands()))}"


def test_every_specdash_subcommand_named_exists():
    parser = build_parser()
    subcommands = set(next(action for action in parser._actions if action.dest == "command").choices or ())
    fenced = "\n".join(re.findall(r"^```[a-z]*\n(.*?)^```", _text(), flags=re.MULTILINE | re.DOTALL))
    named = _code(r"`specdash ([a-z][a-z-]*)") | set(re.findall(r"^\s*specdash ([a-z][a-z-]*)", fenced, re.M))
    assert named and named <= subcommands, f"no such subcommand: {sorted(named - subcommands)}"


def _as_request_path(path: str) -> str:
    """A documented path with its placeholders (`<id>`, `{id}`) filled and its query dropped."""
    path = path.split("?", 1)[0]
    return re.sub(r"<[^>]+>|\{[^}]+\}", "1", path)


def test_every_page_and_endpoint_named_resolves():
    paths = _code(r"`(/[a-z][^`\s]*)`") | _code(r"`(?:GET|POST|PUT|PATCH|DELETE) (/[^`\s]+)")
    paths |= _code(r"`(?:GET|POST)`/`(?:GET|POST) (/[^`\s]+)`")
    app_paths = {p for p in paths if not p.startswith(HOST_PATHS) and p.split("?")[0] not in SERVER_ENDPOINTS}
    assert len(app_paths) > 20
    unresolved = []
    for path in sorted(app_paths):
        try:
            resolve(_as_request_path(path))
        except Resolver404:
            unresolved.append(path)
    assert not unresolved, f"the docs name paths no URL serves: {unresolved}"


@pytest.mark.django_db
def test_every_documented_api_method_is_in_the_schema(admin_client):
    schema = admin_client.get("/api/openapi.json").json()
    served = {
        (method.upper(), re.sub(r"\{[^}]+\}", "{}", path))
        for path, operations in schema["paths"].items()
        for method in operations
    }
    named = {
        (method, re.sub(r"\{[^}]+\}", "{}", path.split("?", 1)[0]))
        for method, path in re.findall(r"`(GET|POST|PUT|PATCH|DELETE) (/api/[^`\s]+)", _text())
    }
    assert len(named) > 20
    assert named <= served, f"documented but not served: {sorted(named - served)}"


def test_every_repository_path_named_exists():
    named = {p for p in _code(r"`([\w./-]+)`") if p.startswith(TOP_LEVEL)}
    assert len(named) > 20
    missing = sorted(p for p in named if not (REPO / p.rstrip("/")).exists())
    assert not missing, f"the docs name files that are not in the repository: {missing}"


def test_every_setting_named_is_read_by_the_code():
    named = _code(r"`(SPECDASH_[A-Z0-9_]+)`")
    code = "\n".join(
        path.read_text()
        for folder in ("dashboard", "experiments", "workers", "conftest.py", "Makefile")
        for path in ([REPO / folder] if not (REPO / folder).is_dir() else (REPO / folder).rglob("*.py"))
    )
    unread = sorted(name for name in named if not name.endswith("_") and name not in code)
    assert not unread, f"the docs name settings nothing reads: {unread}"
