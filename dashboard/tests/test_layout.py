"""The dependency rules of ../shared/STYLE.md, checked on every import statement of the tree (function-local ones
included), and the size rule: no product module past ~400 lines without saying why at its top."""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PRODUCT = ("experiments", "workers", "dashboard")
# Pure: statistics, figures, the explanatory model, the SGLang adapter, nvidia-smi's answers. No Django, and of the
# product only other pure modules.
PURE = (
    "experiments.analysis",
    "experiments.charts",
    "experiments.rules",
    "experiments.formats",
    "experiments.tuning",
    "experiments.remedies",
    "workers.sglang",
    "workers.hostreads",
)
FRAMEWORKS = ("django", "channels", "celery", "ninja", "asgiref", "daphne", "channels_redis")
# The `specdash` command, installed alone on laptops and CI runners (pyproject.toml): its own modules, the standard
# library, httpx and PyYAML.
CLI = "experiments.cli"
CLI_DEPENDENCIES = ("httpx", "yaml")
MAX_LINES = 400
LONG_MODULE_REASON = "Long module:"  # starts the sentence of a long module's docstring that says why


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, root: Path) -> Iterator[str]:
    """Every module `path` imports, relative imports resolved to absolute names."""
    module = _module_name(path, root)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                prefix = ".".join(base)
                target = f"{prefix}.{node.module}" if node.module else prefix
            else:
                target = node.module or ""
            if node.module:
                yield target  # (`from . import x` imports x, not what the package's __init__ holds)
            # `from . import x` / `from pkg import submodule`: the names may be modules too.
            yield from (f"{target}.{alias.name}" for alias in node.names)


def _within(name: str, prefixes: tuple[str, ...] | str) -> bool:
    prefixes = (prefixes,) if isinstance(prefixes, str) else prefixes
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _is_test_code(module: str) -> bool:
    return ".tests" in f".{module}" or module.endswith("conftest")


def violations(root: Path) -> list[str]:
    found = []
    for path in sorted(root.glob("**/*.py")):
        if ".venv" in path.parts or "migrations" in path.parts:
            continue
        module = _module_name(path, root)
        if not _within(module, (*PRODUCT, "simhost")):
            continue
        test_code = _is_test_code(module)
        for target in set(imports_of(path, root)):
            where = f"{module} imports {target}"
            if _within(module, "experiments") and _within(target, "workers"):
                found.append(f"{where}: the domain never imports the workers (enqueue by task name)")
            if _within(module, PURE) and not test_code:
                if _within(target, FRAMEWORKS):
                    found.append(f"{where}: a pure module imports no framework")
                elif _within(target, PRODUCT) and not _within(target, PURE):
                    found.append(f"{where}: a pure module imports only pure modules of the product")
            if _within(module, ("simhost", "workers.benchclient")) and _within(target, PRODUCT):
                if not _within(target, "workers.benchclient") or not _within(module, "workers.benchclient"):
                    found.append(f"{where}: the host side imports nothing of the dashboard")
            if _within(module, "workers.benchclient") and not test_code:
                top = target.split(".")[0]
                if top not in (*sys.stdlib_module_names, "aiohttp") and not _within(target, "workers.benchclient"):
                    found.append(f"{where}: the benchmark client ships with the standard library and aiohttp only")
            if _within(module, CLI) and not test_code:
                top = target.split(".")[0]
                if top not in (*sys.stdlib_module_names, *CLI_DEPENDENCIES) and not _within(target, CLI):
                    found.append(f"{where}: the command line imports the standard library, httpx and yaml only")
            if _within(target, "simhost") and _within(module, PRODUCT) and not test_code:
                if not _within(module, "dashboard.demo"):
                    found.append(f"{where}: only the demo's wiring imports the simulator")
    return found


# What a module may call, by where it lives: ORM writes only outside `reads/`, tasks sent only by the dispatcher,
# group sends only by the broadcast module.
ORM_WRITES = {"save", "create", "update", "delete", "bulk_create", "bulk_update", "get_or_create", "update_or_create"}
TASK_SENDS = {"send_task", "delay", "apply_async", "delay_on_commit", "apply_async_on_commit"}
READS = "experiments.reads"
DISPATCHER = "experiments.actions.dispatch"
BROADCASTER = "experiments.live.broadcast"


QUERYSET_HINTS = {"objects", "filter", "exclude", "all", "select_related", "prefetch_related"}


def _calls(path: Path) -> Iterator[tuple[str, int]]:
    """The attribute names called in `path` (`x.save()` -> "save"), with their line numbers. `update` counts only on
    what reads as a queryset (`Run.objects.filter(...).update(...)`): a dict has one too."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            name = node.func.attr
            if name == "update":
                receiver = {n.attr for n in ast.walk(node.func.value) if isinstance(n, ast.Attribute)}
                if not receiver & QUERYSET_HINTS:
                    continue
            yield name, node.lineno


def _task_names(path: Path) -> Iterator[int]:
    """Line numbers of string constants naming a worker task."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("workers.tasks."):
            yield node.lineno


def call_violations(root: Path) -> list[str]:
    found = []
    for path in sorted(root.glob("**/*.py")):
        if ".venv" in path.parts or "migrations" in path.parts:
            continue
        module = _module_name(path, root)
        if not _within(module, PRODUCT) or _is_test_code(module):
            continue
        for name, line in _calls(path):
            where = f"{module}:{line} calls {name}()"
            if _within(module, READS) and name in ORM_WRITES:
                found.append(f"{where}: reads never write")
            if name in TASK_SENDS and _within(module, "experiments") and module != DISPATCHER:
                found.append(f"{where}: only {DISPATCHER} sends tasks")
            if name == "group_send" and module != BROADCASTER:
                found.append(f"{where}: only {BROADCASTER} sends to groups")
        if _within(module, "experiments") and module != DISPATCHER:
            found += [f"{module}:{line} names a task: only {DISPATCHER} does" for line in _task_names(path)]
    return found


def oversized_modules(root: Path) -> list[str]:
    found = []
    for path in sorted(root.glob("**/*.py")):
        if ".venv" in path.parts or "migrations" in path.parts:
            continue
        module = _module_name(path, root)
        if not _within(module, PRODUCT) or _is_test_code(module):
            continue
        text = path.read_text()
        lines = text.count("\n")
        docstring = ast.get_docstring(ast.parse(text)) or ""
        if lines > MAX_LINES and LONG_MODULE_REASON not in docstring:
            found.append(f"{module}: {lines} lines, and its docstring does not say why ({LONG_MODULE_REASON} ...)")
    return found


def _write(root: Path, files: dict[str, str]) -> None:
    """A tree of modules for a rule's negative or positive case."""
    for module, source in files.items():
        path = root / module
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)


def test_it_finds_no_import_against_the_dependency_rules():
    assert violations(REPO) == []


def test_it_finds_no_call_against_the_rules_of_its_folder():
    assert call_violations(REPO) == []


@pytest.mark.parametrize(
    ("module", "source", "rule"),
    [
        ("experiments/reads/runs.py", "def f(run):\n    run.save()\n", "reads never write"),
        (
            "experiments/reads/runs.py",
            "def f(Run):\n    Run.objects.filter(pk=1).update(state='x')\n",
            "reads never write",
        ),
        ("experiments/actions/runs.py", "def f(app):\n    app.send_task('x')\n", "sends tasks"),
        ("experiments/views/runs.py", "def f(task):\n    task.delay(1)\n", "sends tasks"),
        ("experiments/actions/hosts.py", "TASK = 'workers.tasks.drive_host'\n", "names a task"),
        (
            "experiments/live/consumers.py",
            "async def f(layer):\n    await layer.group_send('g', {})\n",
            "sends to groups",
        ),
        ("workers/run/server_log.py", "async def f(layer):\n    await layer.group_send('g', {})\n", "sends to groups"),
    ],
)
def test_it_catches_each_kind_of_forbidden_call(tmp_path, module, source, rule):
    _write(tmp_path, {module: source})

    assert [v for v in call_violations(tmp_path) if rule in v], call_violations(tmp_path)


def test_it_allows_the_calls_each_folder_may_make(tmp_path):
    _write(
        tmp_path,
        {
            "experiments/reads/runs.py": "def f(q, d):\n    d.update(q.filter(x=1).values('y'))\n",
            "experiments/actions/dispatch.py": "T = 'workers.tasks.drive_host'\ndef f(app):\n    app.send_task(T)\n",
            "experiments/live/broadcast.py": "async def f(layer):\n    await layer.group_send('g', {})\n",
            "experiments/actions/runs.py": "def f(run):\n    run.save()\n",
        },
    )

    assert call_violations(tmp_path) == []


def test_it_finds_no_long_module_without_a_reason():
    assert oversized_modules(REPO) == []


@pytest.mark.parametrize(
    ("module", "source", "rule"),
    [
        ("experiments/views.py", "from workers import tasks\n", "never imports the workers"),
        ("experiments/analysis/stats.py", "def f():\n    from django.db import models\n", "imports no framework"),
        ("experiments/charts/comparison.py", "from ..models import Run\n", "only pure modules"),
        ("experiments/rules/sweeps.py", "from django.conf import settings\n", "imports no framework"),
        ("experiments/formats/markdown.py", "from experiments.reads import reports\n", "only pure modules"),
        ("workers/sglang/x.py", "from ..ssh import HostConnection\n", "only pure modules"),
        ("simhost/engine.py", "from experiments.models import Run\n", "imports nothing of the dashboard"),
        ("workers/benchclient/client.py", "import numpy\n", "standard library and aiohttp only"),
        ("workers/tasks.py", "from simhost import hostsetup\n", "only the demo's wiring"),
        ("experiments/cli/main.py", "from experiments.models import Run\n", "standard library, httpx and yaml"),
        ("experiments/cli/gates.py", "def f():\n    import django\n", "standard library, httpx and yaml"),
    ],
)
def test_it_catches_each_kind_of_forbidden_import(tmp_path, module, source, rule):
    _write(tmp_path, {module: source})

    assert [v for v in violations(tmp_path) if rule in v], violations(tmp_path)


def test_it_allows_what_the_rules_allow(tmp_path):
    _write(
        tmp_path,
        {
            "workers/run/x.py": "from experiments.models import Run\nfrom ..sglang import parse_line\n",
            "dashboard/demo/management/commands/demo.py": "from simhost import hostsetup\n",
            "workers/tests/test_x.py": "from simhost import hostsetup\n",
            "experiments/analysis/x.py": "from . import tdist\nimport statistics\n",
            "workers/benchclient/client.py": "import aiohttp\nfrom .transport import HttpPool\n",
            "experiments/cli/main.py": "import httpx\nimport yaml\nimport json\nfrom . import gates\n",
        },
    )

    assert violations(tmp_path) == []


def test_it_catches_a_long_module_without_a_reason(tmp_path):
    (tmp_path / "workers").mkdir()
    (tmp_path / "workers" / "big.py").write_text('"""Big."""\n' + "x = 1\n" * (MAX_LINES + 1))
    (tmp_path / "workers" / "reasoned.py").write_text(
        f'"""Reasoned.\n\n{LONG_MODULE_REASON} one state machine."""\n' + "x = 1\n" * (MAX_LINES + 1)
    )

    assert [problem.split(":")[0] for problem in oversized_modules(tmp_path)] == ["workers.big"]
