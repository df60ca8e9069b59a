"""The README and docs/ stay true: every command, page, API endpoint, file, setting and link they name exists, and
the figures they give are what the demo shows (its seeded history's moves, its ports, its SGLang) and what the API
answers (the status of a call over a quota).

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
# Paths the docs name on a GPU host or its inference server (SGLang's, vLLM's), not on specdash.
HOST_PATHS = ("/etc/", "/proc/", "/dev/", "/tmp/", "/usr/", "/var/", "/opt/", "/home/", "/root/")
SERVER_ENDPOINTS = {
    "/health", "/health_generate", "/metrics", "/start_profile", "/stop_profile", "/get_server_info", "/server_info",
    "/v1/completions", "/reset_prefix_cache",
}  # fmt: skip
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


# The figures the docs give of the demo and of the API: what the demo's seeded history holds and what the API answers.

NUMBER_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "ten": 10}
# A move of a series as the docs write it: "from 88.8 to 82.2 tok/s" or "301.9 → 279.5 tok/s".
MOVE = re.compile(r"(?:from )?(\d+(?:\.\d+)?)(?: to | → | -> )(\d+(?:\.\d+)?) tok/s")


@pytest.fixture
def demo_flag(owner):
    """The flag the demo's seeded history raises, seeded as `make demo` seeds it."""
    from dashboard.demo.history import seed_drift_history
    from dashboard.demo.management.commands.demo import demo_experiment_payload
    from experiments.models import Flag
    from experiments.tests.factories import make_host

    host = make_host(name="simhost")
    payload = demo_experiment_payload(host.models_root)
    seed_drift_history(host, payload["baseline"], payload["profile"], owner)
    return Flag.objects.prefetch_related("series").get()


def _as_shown(value: float, digits: int) -> str:
    return f"{value:.{digits}f}"


@pytest.mark.django_db
def test_every_move_of_a_series_the_docs_give_is_one_the_demo_shows(demo_flag):
    from dashboard.demo.history import DROP_AFTER, NIGHTS

    digits = demo_flag.digits
    shown = {(_as_shown(s.baseline_mean, digits), _as_shown(s.new_mean, digits), s.concurrency)
             for s in demo_flag.series.all()}  # fmt: skip
    moves = {(before, after) for before, after in MOVE.findall(" ".join(_text().split()))}
    assert moves, "the docs name no move of a series"
    assert moves <= {(before, after) for before, after, _ in shown}, (moves, shown)
    # The README names the move the Flags list shows first (the flag's own), at its concurrency.
    readme = " ".join((REPO / "README.md").read_text().split())  # a sentence as read, its line breaks aside
    flag_move = f"{_as_shown(demo_flag.baseline_mean, digits)} → {_as_shown(demo_flag.new_mean, digits)} tok/s"
    assert f"{flag_move} at concurrency {demo_flag.concurrency}" in readme, flag_move
    # "about 7%" as the Flags list rounds the change, "four nights ago" and "a fortnight" as the history is seeded.
    percent = re.search(r"dropped about (\d+)%", readme)
    assert percent and int(percent.group(1)) == round(abs(demo_flag.change) * 100)
    ago = re.search(r"(\w+) nights ago", readme)
    assert ago and NUMBER_WORDS[ago.group(1)] == NIGHTS - DROP_AFTER
    assert "a fortnight of a nightly baseline" in readme and NIGHTS == 14


def test_the_readme_names_each_port_of_the_demo_and_its_sglang_where_it_introduces_the_demo():
    from simhost import versions

    demo = (REPO / "dashboard" / "demo" / "management" / "commands" / "demo.py").read_text()
    ports = re.findall(r'os\.environ\.get\("(SPECDASH_\w*PORT)", "(\d+)"\)', demo)
    assert len(ports) == 3, ports  # the web server, the simulated host's sshd, its SGLang servers
    readme = (REPO / "README.md").read_text()
    demo_part = " ".join(readme[readme.index("`make demo` needs") : readme.index("`make test` needs")].split())
    for setting, port in ports:
        assert f"`{setting}`" in demo_part and re.search(rf"\bon (?:port )?{port}\b", demo_part), (setting, port)
    assert "Redis on 127.0.0.1:6379" in demo_part
    assert f"the newest SGLang it imitates ({versions.NEWEST})" in demo_part


QUOTA = re.compile(r"\b(?:over|past)[ -](?:a |the )?quotas?\b", re.IGNORECASE)
STATUS = re.compile(r"\b([45]\d\d)\b")


def _units(doc: Path) -> list[str]:
    """A doc's sentences (a paragraph's lines joined) and its table rows, each on its own."""
    units: list[str] = []
    for block in re.split(r"\n\s*\n", doc.read_text()):
        rows = [line for line in block.splitlines() if line.startswith("|")]
        units += rows
        prose = " ".join(line for line in block.splitlines() if not line.startswith("|"))
        units += re.split(r"(?<=[.!?])\s+(?=[A-Z*`(])", prose)
    return units


def _quota_statuses() -> dict[str, set[str]]:
    """By doc, the status code the docs give each mention of a call over a quota: the code nearest to it in its
    sentence or table row (a row or sentence may name other statuses for other refusals)."""
    found: dict[str, set[str]] = {}
    for doc in DOCS:
        for unit in _units(doc):
            for mention in QUOTA.finditer(unit):
                codes = [(abs(code.start() - mention.start()), code.group(1)) for code in STATUS.finditer(unit)]
                if codes:
                    found.setdefault(doc.name, set()).add(min(codes)[1])
    return found


@pytest.mark.django_db
def test_every_status_the_docs_name_for_a_call_over_quota_is_the_apis(client, member, settings, private_queue):
    from experiments.models import ApiToken
    from experiments.tests.factories import make_host, small_submission

    settings.SPECDASH_QUOTA_LAUNCHES_PER_USER = 0
    _, token = ApiToken.issue(member)
    response = client.post("/api/experiments", small_submission(make_host(), 1), content_type="application/json",
                           headers={"Authorization": f"Bearer {token}"})  # fmt: skip
    assert response.json()["detail"] == "over quota", response.content

    named = _quota_statuses()
    assert {"api.md", "team.md"} <= set(named), named  # both say what a call over a quota gets
    wrong = {doc: codes for doc, codes in named.items() if codes != {str(response.status_code)}}
    assert not wrong, f"the API answers {response.status_code} over a quota; the docs say {wrong}"
