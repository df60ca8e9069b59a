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
    "experiments.history_charts",
    "experiments.telemetry_chart",
    "experiments.explanations",
    "experiments.launch_policy",
    "experiments.log_metrics",
    "experiments.model_checks",
    "experiments.notes",
    "experiments.sweeps",
    "experiments.study_charts",
    "experiments.tuning",
    "experiments.remedies",
    "experiments.run_facts",
    "experiments.notification_texts",
    "experiments.prompt_sampling",
    "workers.sglang",
    "workers.gpus",
    "workers.hostreads",
)
FRAMEWORKS = ("django", "channels", "celery", "ninja", "asgiref", "daphne", "channels_redis")
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
            if _within(target, "simhost") and _within(module, PRODUCT) and not test_code:
                if not _within(module, "dashboard.demo"):
                    found.append(f"{where}: only the demo's wiring imports the simulator")
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


def test_it_finds_no_import_against_the_dependency_rules():
    assert violations(REPO) == []


def test_it_finds_no_long_module_without_a_reason():
    assert oversized_modules(REPO) == []


@pytest.mark.parametrize(
    ("module", "source", "rule"),
    [
        ("experiments/views.py", "from workers import tasks\n", "never imports the workers"),
        ("experiments/analysis/stats.py", "def f():\n    from django.db import models\n", "imports no framework"),
        ("experiments/charts.py", "from .models import Run\n", "only pure modules"),
        ("workers/sglang/x.py", "from ..ssh import HostConnection\n", "only pure modules"),
        ("simhost/engine.py", "from experiments.models import Run\n", "imports nothing of the dashboard"),
        ("workers/benchclient/client.py", "import numpy\n", "standard library and aiohttp only"),
        ("workers/tasks.py", "from simhost import hostsetup\n", "only the demo's wiring"),
    ],
)
def test_it_catches_each_kind_of_forbidden_import(tmp_path, module, source, rule):
    path = tmp_path / module
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)

    assert [v for v in violations(tmp_path) if rule in v], violations(tmp_path)


def test_it_allows_what_the_rules_allow(tmp_path):
    for module, source in {
        "workers/run/x.py": "from experiments.models import Run\nfrom ..sglang import parse_line\n",
        "dashboard/demo/management/commands/demo.py": "from simhost import hostsetup\n",
        "workers/tests/test_x.py": "from simhost import hostsetup\n",
        "experiments/analysis/x.py": "from . import tdist\nimport statistics\n",
        "workers/benchclient/client.py": "import aiohttp\nfrom .transport import HttpPool\n",
    }.items():
        path = tmp_path / module
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)

    assert violations(tmp_path) == []


def test_it_catches_a_long_module_without_a_reason(tmp_path):
    (tmp_path / "workers").mkdir()
    (tmp_path / "workers" / "big.py").write_text('"""Big."""\n' + "x = 1\n" * (MAX_LINES + 1))
    (tmp_path / "workers" / "reasoned.py").write_text(
        f'"""Reasoned.\n\n{LONG_MODULE_REASON} one state machine."""\n' + "x = 1\n" * (MAX_LINES + 1)
    )

    assert [problem.split(":")[0] for problem in oversized_modules(tmp_path)] == ["workers.big"]
