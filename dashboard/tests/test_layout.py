"""The dependency rules of ../shared/STYLE.md, checked on every import statement of the tree (function-local ones
included): the pure packages, the command line, the host side, the Django folders' order and no import circle; what
each folder may call; reads that query; the simulator's models named by the demo only; and the size rule: no product
module past ~400 lines without saying why at its top."""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from experiments.tests import sources

REPO = Path(__file__).resolve().parents[2]
PRODUCT = ("experiments", "workers", "dashboard")
# Pure: statistics, figures, the explanatory model, the engine seam and the engines' adapters, nvidia-smi's
# answers. No Django, and of the product only other pure modules.
PURE = (
    "experiments.analysis",
    "experiments.charts",
    "experiments.rules",
    "experiments.formats",
    "experiments.tuning",
    "experiments.remedies",
    "workers.sglang",
    "workers.vllm",
    "workers.engines",
    "workers.hostreads",
)
FRAMEWORKS = ("django", "channels", "celery", "ninja", "asgiref", "daphne", "channels_redis")
# The `specdash` command, installed alone on laptops and CI runners (pyproject.toml): its own modules, the standard
# library, httpx and PyYAML.
CLI = "experiments.cli"
CLI_DEPENDENCIES = ("httpx", "yaml")
MAX_LINES = 400
LONG_MODULE_REASON = "Long module:"  # starts the sentence of a long module's docstring that says why
# The Django folders of experiments/, bottom to top: a folder imports from its own level and below only. api/ and
# views/ are both the top, adapters side by side: neither imports the other.
DJANGO_LEVELS = {"models": 0, "forms": 1, "reads": 2, "serializers": 3, "actions": 4, "live": 5, "api": 6, "views": 6}
# A module that stands at another level than its folder: live/broadcast, the one module that knows the pages'
# groups, sends what the actions do (on commit), so it stands with them: they import it, it imports nothing above.
PLACED = {"experiments.live.broadcast": "actions"}


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _package_of(path: Path, root: Path) -> str:
    module = _module_name(path, root)
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def _from_target(node: ast.ImportFrom, package: str) -> str:
    """The absolute name of what `from <target> import ...` names, relative imports resolved."""
    if not node.level:
        return node.module or ""
    prefix = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
    return f"{prefix}.{node.module}" if node.module else prefix


def imports_of(path: Path, root: Path) -> Iterator[str]:
    """Every module `path` imports, relative imports resolved to absolute names."""
    package = _package_of(path, root)
    for node in ast.walk(sources.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            target = _from_target(node, package)
            if node.module:
                yield target  # (`from . import x` imports x, not what the package's __init__ holds)
            # `from . import x` / `from pkg import submodule`: the names may be modules too.
            yield from (f"{target}.{alias.name}" for alias in node.names)


def _within(name: str, prefixes: tuple[str, ...] | str) -> bool:
    prefixes = (prefixes,) if isinstance(prefixes, str) else prefixes
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _is_test_code(module: str) -> bool:
    return ".tests" in f".{module}" or module.endswith("conftest")


def _layer(name: str) -> str | None:
    """The Django folder of experiments/ at whose level `name` (a module, or a name imported from one) stands."""
    for module, layer in PLACED.items():
        if _within(name, module):
            return layer
    parts = name.split(".")
    return parts[1] if parts[0] == "experiments" and len(parts) > 1 and parts[1] in DJANGO_LEVELS else None


def _layer_problem(module: str, target: str) -> str | None:
    """What is wrong with `module` importing `target` in the Django folders' order, if anything."""
    own, other = _layer(module), _layer(target)
    if own is None or other is None or own == other or module.split(".")[1] == target.split(".")[1]:
        return None  # outside the ordered folders, or within one
    if DJANGO_LEVELS[other] < DJANGO_LEVELS[own]:
        return None
    if DJANGO_LEVELS[other] == DJANGO_LEVELS[own]:
        return f"{own}/ and {other}/ are both the top: neither imports the other"
    return f"{own}/ stands below {other}/ (models < forms < reads < serializers < actions < live < api, views)"


def violations(root: Path) -> list[str]:
    found = []
    for path in sorted(root.glob("**/*.py")):
        if ".venv" in path.parts or "migrations" in path.parts:
            continue
        module = _module_name(path, root)
        if not _within(module, (*PRODUCT, "simhost")):
            continue
        test_code = _is_test_code(module)
        targets = set(imports_of(path, root))
        for target in targets:
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
            # (`from experiments.live import broadcast` names the folder's package on the way to the module it wants)
            passing = target.count(".") == 1 and any(other.startswith(f"{target}.") for other in targets)
            if not test_code and not passing and (problem := _layer_problem(module, target)):
                found.append(f"{where}: {problem}")
            if _within(module, "experiments.actions") and _within(target, "experiments.forms") and not test_code:
                found.append(f"{where}: an action takes what a view or the API validated: it imports no forms")
            owner, _, name = target.rpartition(".")
            if _layer(module) and name.startswith("_") and not name.startswith("__") and owner != module:
                found.append(f"{where}: a private name is its own module's (a shared helper is public)")
    return found


def simulated_model_names(root: Path) -> list[str]:
    """Where the product names a model of the simulated host (a directory of simhost/models/) in its code (a
    docstring may cite one): only the demo's wiring does, so no team's page starts with the simulator's models."""
    simulated = {path.name for path in (root / "simhost" / "models").glob("*") if path.is_dir()}
    found = []
    for path in sorted(root.glob("**/*.py")):
        module = _module_name(path, root)
        if ".venv" in path.parts or not _within(module, PRODUCT) or _is_test_code(module):
            continue
        if _within(module, "dashboard.demo"):
            continue
        tree = sources.parse(path.read_text(), str(path))
        docstrings = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                if named := simulated & set(re.split(r"[/\s,]", node.value)):
                    found.append(f"{module}:{node.lineno} names {', '.join(sorted(named))}: only the demo does")
    return found


def _imported_modules(path: Path, root: Path, modules: set[str]) -> Iterator[str]:
    """The modules of `modules` that `path` imports: `from pkg import name` is the module pkg.name where there is
    one, else pkg (its __init__); a module's own package, run first by Python, is not counted as imported."""
    package = _package_of(path, root)
    for node in ast.walk(sources.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                name = alias.name
                while name and name not in modules:
                    name = name.rpartition(".")[0]
                yield from [name] if name else []
        elif isinstance(node, ast.ImportFrom):
            target = _from_target(node, package)
            for alias in node.names:
                if f"{target}.{alias.name}" in modules:
                    yield f"{target}.{alias.name}"
                elif target in modules:
                    yield target


def import_circles(root: Path) -> list[str]:
    """Modules of experiments/ that import each other, directly or round a longer loop: every import statement
    counts (function-local and type-checking ones too, which only hide the loop from Python)."""
    paths = {}
    for path in sorted((root / "experiments").glob("**/*.py")):
        module = _module_name(path, root)
        if "migrations" not in path.parts and not _is_test_code(module):
            paths[module] = path
    graph = {module: set(_imported_modules(path, root, set(paths))) - {module} for module, path in paths.items()}
    # Tarjan's strongly connected components: a component of two modules or more is a circle.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in sorted(graph[module]):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component: list[str] = []
            while not component or component[-1] != module:
                component.append(stack.pop())
            if len(component) > 1:
                circles.append(" <-> ".join(sorted(component)) + ": an import circle")

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(circles)


# A read queries the database (`Model.objects`, a related manager, a queryset method); a module that does none of
# that computes on what it is given, and belongs with the pure modules in analysis/.
QUERY_NAMES = {
    "objects", "filter", "exclude", "values", "values_list", "select_related", "prefetch_related", "annotate",
    "aggregate", "only", "defer", "in_bulk", "iterator", "exists", "order_by", "distinct", "refresh_from_db",
}  # fmt: skip


def query_free_reads(root: Path) -> list[str]:
    found = []
    for path in sorted((root / "experiments" / "reads").glob("**/*.py")):
        if path.name == "__init__.py":
            continue
        tree = sources.parse(path.read_text(), str(path))
        names = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
        if not names & QUERY_NAMES and not any(name.endswith("_set") for name in names):
            found.append(f"{_module_name(path, root)} runs no query: it belongs in analysis/ (pure)")
    return found


# What a module may call, by where it lives: ORM writes only outside `reads/`, tasks sent only by the dispatcher,
# group sends only by the broadcast module.
ORM_WRITES = {"save", "create", "update", "delete", "bulk_create", "bulk_update", "get_or_create", "update_or_create"}
TASK_SENDS = {"send_task", "delay", "apply_async", "delay_on_commit", "apply_async_on_commit"}
READS = "experiments.reads"
# They answer requests and push to pages: a change of state they ask for is an action's.
ADAPTERS = ("experiments.views", "experiments.api", "experiments.live", "experiments.serializers")
DISPATCHER = "experiments.actions.dispatch"
BROADCASTER = "experiments.live.broadcast"


QUERYSET_HINTS = {"objects", "filter", "exclude", "all", "select_related", "prefetch_related"}


def _calls(path: Path) -> Iterator[tuple[str, int]]:
    """The attribute names called in `path` (`x.save()` -> "save"), with their line numbers. `update` counts only on
    what reads as a queryset (`Run.objects.filter(...).update(...)`): a dict has one too."""
    for node in ast.walk(sources.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            name = node.func.attr
            commit = [k.value for k in node.keywords if k.arg == "commit"]
            if name == "save" and commit and isinstance(commit[0], ast.Constant) and commit[0].value is False:
                continue  # a model form's unsaved instance, for an action to save
            if name == "update":
                receiver = {n.attr for n in ast.walk(node.func.value) if isinstance(n, ast.Attribute)}
                if not receiver & QUERYSET_HINTS:
                    continue
            yield name, node.lineno


def _task_names(path: Path) -> Iterator[int]:
    """Line numbers of string constants naming a worker task."""
    for node in ast.walk(sources.parse(path.read_text(), str(path))):
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
            if _within(module, ADAPTERS) and name in ORM_WRITES:
                found.append(f"{where}: views, the API, consumers and serializers write through an action")
            if name in TASK_SENDS and _within(module, "experiments") and module != DISPATCHER:
                found.append(f"{where}: only {DISPATCHER} sends tasks")
            if name == "group_send" and module != BROADCASTER:
                found.append(f"{where}: only {BROADCASTER} sends to groups")
        if _within(module, "experiments") and module != DISPATCHER:
            found += [f"{module}:{line} names a task: only {DISPATCHER} does" for line in _task_names(path)]
    return found


SERIALIZERS = "experiments.serializers"


def json_shapes_outside_serializers(root: Path) -> list[str]:
    """A module-level `*_json` function of the domain outside serializers/: a noun's JSON shape has one home, so the
    API, the websocket events, the exports and the pages cannot disagree on it. (A value type's `as_json` method is
    the value's own, and stays with it; an endpoint named after its `.json` URL is a view, decorated; formats/ holds
    the file formats content is stored and read in.)"""
    found = []
    for path in sorted(root.glob("experiments/**/*.py")):
        if "migrations" in path.parts:
            continue
        module = _module_name(path, root)
        if _is_test_code(module) or _within(module, (SERIALIZERS, CLI, "experiments.formats")):
            continue
        for node in sources.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.endswith("_json"):
                if not node.name.startswith("_") and not node.decorator_list:
                    found.append(f"{module}:{node.lineno} defines {node.name}: JSON shapes live in serializers/")
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
        docstring = ast.get_docstring(sources.parse(text)) or ""
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


def test_it_finds_no_import_circle():
    assert import_circles(REPO) == []


def test_it_finds_no_simulated_model_named_outside_the_demo():
    assert simulated_model_names(REPO) == []


def test_it_finds_no_read_that_runs_no_query():
    assert query_free_reads(REPO) == []


def test_it_finds_no_json_shape_outside_serializers():
    assert json_shapes_outside_serializers(REPO) == []


def test_it_catches_a_json_shape_outside_serializers(tmp_path):
    _write(
        tmp_path,
        {
            "experiments/reads/reports.py": "def comparison_rows_json(report):\n    return []\n",
            "experiments/api/compare.py": "def _row_json(row):\n    return {}\n",  # private helpers of a view
            "experiments/views/exports.py": "@requires('x')\ndef experiment_export_json(request):\n    return 1\n",
            "experiments/serializers/comparisons.py": "def comparison_rows_json(c):\n    return []\n",
            "experiments/analysis/gain.py": "class Gain:\n    def as_json(self):\n        return {}\n",
        },
    )

    assert json_shapes_outside_serializers(tmp_path) == [
        "experiments.reads.reports:1 defines comparison_rows_json: JSON shapes live in serializers/"
    ]


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
        ("experiments/views/users.py", "def f(user):\n    user.save(update_fields=['email'])\n", "through an action"),
        ("experiments/api/runs.py", "def f(Run):\n    Run.objects.filter(pk=1).delete()\n", "through an action"),
        ("experiments/live/consumers.py", "def f(Run):\n    Run.objects.create()\n", "through an action"),
        ("experiments/serializers/runs.py", "def f(run):\n    run.save()\n", "through an action"),
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
            "experiments/views/hosts.py": "def f(form, do):\n    do(form.save(commit=False))\n",
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
        # The Django folders, each against the folder just above it (and the top's two against each other).
        ("experiments/models/configs.py", "from experiments.forms import ServerConfigForm\n", "models/ stands below"),
        ("experiments/models/prompts.py", "def f():\n    from ..reads.prompt_store import x\n", "models/ stands below"),
        ("experiments/forms/sweeps.py", "from experiments.reads.queueing import launch_durations\n", "forms/ stands"),
        ("experiments/reads/config_history.py", "from experiments import serializers\n", "reads/ stands below"),
        ("experiments/serializers/runs.py", "from ..actions.runs import do_cancel_run\n", "serializers/ stands"),
        ("experiments/actions/runs.py", "from experiments.live import consumers\n", "actions/ stands below"),
        ("experiments/live/consumers.py", "from experiments.api import base\n", "live/ stands below"),
        ("experiments/live/broadcast.py", "from experiments.api.runs import x\n", "actions/ stands below"),
        ("experiments/live/broadcast.py", "from ..views import runs\n", "actions/ stands below"),
        ("experiments/api/experiments.py", "from experiments.views.exports import x\n", "both the top"),
        ("experiments/views/runs.py", "from ..api.runs import x\n", "both the top"),
        ("experiments/actions/runs.py", "from ..forms import ServerConfigForm\n", "it imports no forms"),
        ("experiments/actions/runs.py", "from .experiments import _queue_runs\n", "a private name"),
        ("experiments/views/runs.py", "def f():\n    from ..reads.reports import _rows\n", "a private name"),
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
            "experiments/views/runs.py": "from ..actions.runs import x\nfrom ..forms import y\nfrom . import access\n",
            "experiments/api/runs.py": "from experiments import serializers\nfrom experiments.live import broadcast\n",
            "experiments/live/consumers.py": "from experiments.reads import runs\nfrom . import broadcast\n",
            "experiments/actions/runs.py": "from experiments.live import broadcast\nfrom ..reads import queueing\n",
            "experiments/live/broadcast.py": "from experiments import serializers\nfrom . import log_messages\n",
            "experiments/serializers/runs.py": "from experiments.reads.queueing import QueuedRun\n",
            "experiments/reads/config_history.py": "from experiments.forms.configs import ServerConfigForm\n",
            "experiments/forms/configs.py": "from ..models import ServerConfig\nfrom ..rules import launch_policy\n",
            "experiments/models/configs.py": "from .prompt_store import load_sample\nfrom ..analysis import slo\n",
        },
    )

    assert violations(tmp_path) == []


def test_it_catches_an_import_circle(tmp_path):
    _write(
        tmp_path,
        {
            "experiments/actions/runs.py": "from .studies import advance_study_of_run\n",
            "experiments/actions/studies.py": "def f():\n    from .runs import do_cancel_run\n",
            "experiments/forms/submission.py": "import typing\nif typing.TYPE_CHECKING:\n    from . import sweeps\n",
            "experiments/forms/sweeps.py": "from experiments.forms.submission import plain_errors\n",
            # A loop of three, through a package that re-exports its modules.
            "experiments/models/__init__.py": "from .runs import Run\n",
            "experiments/models/runs.py": "from .experiments import Experiment\n",
            "experiments/models/experiments.py": "from .configs import ServerConfig\n",
            "experiments/models/configs.py": "def f():\n    from experiments.models import Run\n",
        },
    )

    assert import_circles(tmp_path) == [
        "experiments.actions.runs <-> experiments.actions.studies: an import circle",
        "experiments.forms.submission <-> experiments.forms.sweeps: an import circle",
        "experiments.models <-> experiments.models.configs <-> experiments.models.experiments <-> "
        "experiments.models.runs: an import circle",
    ]


def test_it_allows_imports_in_one_direction(tmp_path):
    _write(
        tmp_path,
        {
            "experiments/models/__init__.py": "from .runs import Run\nfrom .experiments import Experiment\n",
            "experiments/models/runs.py": "from .experiments import Experiment\nfrom . import run_states\n",
            "experiments/models/run_states.py": "X = 1\n",
            "experiments/models/experiments.py": "from .run_states import X\n",
            # Importing a module runs its package first: that is no import of the package by the module.
            "experiments/actions/__init__.py": "from .runs import do_cancel_run\n",
            "experiments/actions/runs.py": "from experiments.actions import dispatch\nfrom ..models import Run\n",
            "experiments/actions/dispatch.py": "",
        },
    )

    assert import_circles(tmp_path) == []


def test_it_catches_a_simulated_model_named_outside_the_demo(tmp_path):
    (tmp_path / "simhost" / "models" / "tiny-sim").mkdir(parents=True)
    _write(
        tmp_path,
        {
            "experiments/views/experiments.py": 'def f(root):\n    return f"{root}/tiny-sim"\n',
            "dashboard/settings.py": 'MODELS = "tiny-sim,tiny-sim-eagle3"\n',
            "experiments/formats/prompts.py": '"""Words, as simhost/models/tiny-sim/tokenizer counts them."""\n',
            "dashboard/demo/suggestions.py": 'TARGET = "tiny-sim"\n',
            "experiments/tests/factories.py": 'MODEL = "/models/tiny-sim"\n',
        },
    )

    assert simulated_model_names(tmp_path) == [
        "dashboard.settings:1 names tiny-sim: only the demo does",
        "experiments.views.experiments:2 names tiny-sim: only the demo does",
    ]


def test_it_catches_a_read_that_runs_no_query(tmp_path):
    _write(
        tmp_path,
        {
            "experiments/reads/steady_state.py": "def cells(values):\n    return [dict(v) for v in values]\n",
            "experiments/reads/runs.py": "def rows(Run):\n    return Run.objects.all()\n",
            "experiments/reads/series.py": "def cells(run):\n    return run.measurement_set.all()\n",
            "experiments/reads/history.py": "def rows(qs):\n    return list(qs.values_list('x'))\n",
        },
    )

    assert query_free_reads(tmp_path) == [
        "experiments.reads.steady_state runs no query: it belongs in analysis/ (pure)"
    ]


def test_it_catches_a_long_module_without_a_reason(tmp_path):
    (tmp_path / "workers").mkdir()
    (tmp_path / "workers" / "big.py").write_text('"""Big."""\n' + "x = 1\n" * (MAX_LINES + 1))
    (tmp_path / "workers" / "reasoned.py").write_text(
        f'"""Reasoned.\n\n{LONG_MODULE_REASON} one state machine."""\n' + "x = 1\n" * (MAX_LINES + 1)
    )

    assert [problem.split(":")[0] for problem in oversized_modules(tmp_path)] == ["workers.big"]
