"""The engine seam (`workers.engines`): what an engine must provide, read from the `Engine` protocol itself, held to
every registered engine; and the layout rule that keeps it a seam: the run lifecycle (workers/run/) names no engine
package, it asks `engines.of(config)`."""

from __future__ import annotations

import inspect
import typing
from pathlib import Path

import pytest

from dashboard.tests.test_layout import imports_of
from workers import engines
from workers.engines import Engine, LogGrammar
from workers.engines.facts import MILESTONES

REPO = Path(__file__).resolve().parents[2]
ENGINE_PACKAGES = ("workers.sglang", "workers.vllm")


def _attributes(protocol: type) -> dict[str, object]:
    """The protocol's data members and their types."""
    hints = typing.get_type_hints(protocol)
    return {name: hint for name, hint in hints.items() if not name.startswith("_")}


def _methods(protocol: type) -> dict[str, typing.Callable[..., object]]:
    return {
        name: member
        for name, member in vars(protocol).items()
        if inspect.isfunction(member) and not name.startswith("_")
    }


def _registered() -> list[Engine]:
    return [engines.named(name) for name in engines.ENGINE_NAMES]


def test_it_lists_what_an_engine_must_provide():
    # If the protocol loses its members, every check below would pass on nothing.
    assert {"name", "label", "grammar", "step_lines", "bench_backend", "warming_status"} <= set(_attributes(Engine))
    assert {"launch_argv", "find_failure", "effective_args", "reset_between_cells"} <= set(_methods(Engine))
    assert {"step_marker", "prefill_marker"} <= set(_attributes(LogGrammar))


def test_it_registers_an_engine_for_every_engine_name():
    assert [engine.name for engine in _registered()] == list(engines.ENGINE_NAMES)
    assert engines.of(type("Config", (), {"engine": "vllm"})()).label == "vLLM"
    assert engines.of(type("Config", (), {"engine": ""})()).name == "sglang"
    with pytest.raises(KeyError):
        engines.named("tensorrt-llm")


@pytest.mark.parametrize("name", engines.ENGINE_NAMES)
def test_each_engine_has_every_member_of_the_protocol(name):
    engine = engines.named(name)
    for attribute, hint in _attributes(Engine).items():
        assert hasattr(engine, attribute), f"{name} has no {attribute}"
        value = getattr(engine, attribute)
        assert not inspect.ismethod(value), f"{name}.{attribute} must be an attribute, not a method"
        kinds = typing.get_args(hint) or (hint,)
        if all(isinstance(kind, type) and not getattr(kind, "_is_protocol", False) for kind in kinds):
            assert isinstance(value, kinds), f"{name}.{attribute} = {value!r} is no {hint}"
    for method, declared in _methods(Engine).items():
        found = getattr(engine, method, None)
        assert callable(found), f"{name} has no method {method}"
        assert inspect.iscoroutinefunction(found) == inspect.iscoroutinefunction(declared), f"{name}.{method}: async?"
        wanted = list(inspect.signature(declared).parameters)[1:]  # without self
        assert list(inspect.signature(found).parameters) == wanted, f"{name}.{method} takes other parameters"


@pytest.mark.parametrize("name", engines.ENGINE_NAMES)
def test_each_engine_grammar_has_every_member_of_its_protocol(name):
    grammar = engines.named(name).grammar
    for attribute in _attributes(LogGrammar):
        assert hasattr(grammar, attribute) and not callable(getattr(grammar, attribute))
    assert isinstance(grammar.step_marker, str) and grammar.step_marker
    for method, declared in _methods(LogGrammar).items():
        found = getattr(grammar, method, None)
        assert callable(found), f"{name}'s grammar has no {method}"
        assert list(inspect.signature(found).parameters) == list(inspect.signature(declared).parameters)[1:]


@pytest.mark.parametrize("name", engines.ENGINE_NAMES)
def test_each_grammar_is_total_on_any_text(name):
    grammar = engines.named(name).grammar
    for text in ("", "\r", "\x1b[0;0m", "Traceback (most recent call last):", grammar.step_marker, "(x pid=1) "):
        fact = grammar.parse_line(text)
        grammar.parse_step_line(text)
        grammar.find_warning(text)
        grammar.prefill_was_idle(text)
        assert isinstance(grammar.clean_line(text), str)
        assert not isinstance(fact, engines.facts.Milestone) or fact.name in MILESTONES


# --- the seam as a layout rule ------------------------------------------------------------------------------------


def engine_imports(root: Path) -> list[str]:
    """Each import of an engine package by a module of the run lifecycle (workers/run/), as `module -> target`."""
    found = []
    for path in sorted((root / "workers" / "run").rglob("*.py")):
        for target in imports_of(path, root):
            if any(target == package or target.startswith(f"{package}.") for package in ENGINE_PACKAGES):
                found.append(f"{path.relative_to(root)} -> {target}")
                break  # one is enough to name the module
    return found


def test_the_run_lifecycle_names_no_engine_package():
    assert engine_imports(REPO) == []


@pytest.mark.parametrize(
    ("source", "target"),
    [
        ("from workers.sglang import loglines\n", "workers.sglang"),
        ("from workers.vllm.adapter import VLLM\n", "workers.vllm.adapter"),
        ("def f():\n    import workers.vllm.failures\n", "workers.vllm.failures"),
        ("from ..sglang import failures\n", "workers.sglang"),
    ],
)
def test_it_catches_a_run_module_that_names_an_engine(tmp_path, source, target):
    module = tmp_path / "workers" / "run" / "phase.py"
    module.parent.mkdir(parents=True)
    module.write_text(source)
    (tmp_path / "workers" / "run" / "fine.py").write_text("from workers import engines\n")

    assert engine_imports(tmp_path) == [f"workers/run/phase.py -> {target}"]
