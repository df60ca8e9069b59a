"""The launch-field table (experiments/rules/launch_fields.py) is the only place a launch field is listed: every
form, body, hash, diff, argv, verification, policy and export derives its fields from it, so adding a flag is one
row. A "list" is a tuple, list or set literal naming two or more launch fields (or their flags, or pairs led by
them), or a dict literal mapping two or more of them to constant text (labels, flags). Checked on every product
module; what may restate names says why below."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from experiments.rules import launch_fields
from experiments.tests import sources

REPO = Path(__file__).resolve().parents[2]
PRODUCT = ("experiments", "workers", "dashboard")
TABLE = "experiments/rules/launch_fields.py"
# Where names may be restated, and why.
MAY_RESTATE = {
    # The `specdash` command is installed alone (pyproject.toml: its own modules, httpx and PyYAML): it names the
    # API's fields, the contract, without the server's code.
    "experiments/cli/": "the CLI is installed without the server's modules",
}
# Readers of other tools' result files map each field to where that tool's file states it: the tool's own keys,
# knowledge of the format rather than a list of fields (a dict of field -> that tool's key).
FORMAT_MAPS = "experiments/formats/imported_results/"


def _names() -> set[str]:
    names = {row.name for row in launch_fields.all_fields()}
    flags = {
        flag
        for engine in launch_fields.ENGINE_NAMES
        for row in launch_fields.fields(engine)
        if row.via == launch_fields.FLAG
        for flag in (row.key, *row.aliases)
    }
    return names | flags


def _constant(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _listed(node: ast.AST, *, format_map: bool) -> set[str]:
    """The launch-field names a literal lists (empty when it is no field list)."""
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        # Pairs led by a name (("speculative_num_steps", "s"), ...) list their first items.
        firsts = [e.elts[0] if isinstance(e, ast.Tuple | ast.List) and e.elts else e for e in node.elts]
        return {text for e in firsts if (text := _constant(e)) is not None}
    if isinstance(node, ast.Dict) and not format_map:
        # Field -> constant text is a list with labels; field -> value is a config being made.
        if all(_constant(v) is not None for v in node.values):
            return {text for k in node.keys if k is not None and (text := _constant(k)) is not None}
    return set()


def field_lists(root: Path) -> Iterator[str]:
    names = _names()
    for package in PRODUCT:
        for path in sorted((root / package).rglob("*.py")):
            where = path.relative_to(root).as_posix()
            if "/tests/" in where or "/migrations/" in where or where == TABLE:
                continue
            if any(where.startswith(prefix) for prefix in MAY_RESTATE):
                continue
            tree = sources.parse(path.read_text(), where)
            for node in ast.walk(tree):
                listed = _listed(node, format_map=where.startswith(FORMAT_MAPS)) & names
                if len(listed) >= 2:
                    yield f"{where}:{getattr(node, 'lineno', '?')} lists {', '.join(sorted(listed))}"


def test_no_module_but_the_table_lists_launch_fields():
    assert list(field_lists(REPO)) == []


@pytest.mark.parametrize(
    "source",
    [
        'FIELDS = ("speculative_num_steps", "speculative_eagle_topk")\n',
        'for f in ["model_path", "--tp-size"]:\n    pass\n',
        'LABELS = {"tp_size": "tp", "model_path": "model"}\n',
        'NAMES = (("speculative_num_steps", "s"), ("speculative_eagle_topk", "k"))\n',
    ],
)
def test_it_catches_a_field_list(tmp_path, source):
    (tmp_path / "experiments").mkdir()
    (tmp_path / "experiments" / "x.py").write_text(source)

    assert len(list(field_lists(tmp_path))) == 1


def test_it_allows_a_config_being_made_and_a_single_name(tmp_path):
    (tmp_path / "experiments").mkdir()
    (tmp_path / "experiments" / "x.py").write_text(
        'config = {"model_path": path, "tp_size": 8}\nSTEPS = "speculative_num_steps"\n'
    )

    assert list(field_lists(tmp_path)) == []


def test_every_engine_table_is_whole():
    for engine in launch_fields.ENGINE_NAMES:
        rows = launch_fields.fields(engine)
        names = [row.name for row in rows]
        assert len(names) == len(set(names)), engine
        assert {"model_path", "speculative_algorithm", "speculative_num_steps", "tp_size"} <= set(names), engine
        for row in rows:
            assert row.via == launch_fields.POSITIONAL or row.key, (engine, row.name)
            assert (row.kind == launch_fields.INT) == (row.bounds is not None), (engine, row.name)
            assert (row.kind == launch_fields.CHOICE) == bool(row.choices), (engine, row.name)
            # A setting without a column is vLLM's speculative JSON, or one method's own (kept in engine_options).
            assert row.column or row.via == launch_fields.SPEC_JSON or row.methods, (engine, row.name)
            assert not row.methods or (not row.column and row.speculative), (engine, row.name)
            method_row = launch_fields.field(engine, "speculative_algorithm")
            assert method_row is not None and set(row.methods) <= set(method_row.choices), (engine, row.name)
        # A flag specdash sets is never one a member may add as an extra argument.
        assert launch_fields.managed_flags(engine) >= {"--host", "--port"}


def test_a_baseline_spec_sends_no_speculative_setting():
    spec = {
        "model_path": "/m/target",
        "tp_size": 8,
        "speculative_draft_model_path": "/m/draft",
        "speculative_num_steps": 3,
        "engine_options": {"draft_tensor_parallel_size": 1},
    }

    assert launch_fields.launch_words("sglang", spec) == ([], ["--model-path", "/m/target", "--tp-size", "8"])
    assert launch_fields.launch_words("vllm", spec) == (["/m/target"], ["--tensor-parallel-size", "8"])


def test_a_vllm_spec_sends_its_speculative_settings_as_one_json():
    spec = {
        "model_path": "/m/target",
        "tp_size": 8,
        "speculative_algorithm": "eagle3",
        "speculative_draft_model_path": "/m/draft",
        "speculative_num_steps": 3,
        "engine_options": {"draft_tensor_parallel_size": 1},
    }

    positional, flags = launch_fields.launch_words("vllm", spec, ("--host", "h", "--port", "1"))

    assert positional == ["/m/target"]
    assert flags == [
        "--tensor-parallel-size", "8", "--host", "h", "--port", "1",
        "--speculative-config",
        '{"method":"eagle3","model":"/m/draft","num_speculative_tokens":3,"draft_tensor_parallel_size":1}',
    ]  # fmt: skip


def test_each_engine_refuses_what_its_rows_do_not_take():
    sglang_topk_on_vllm = {"speculative_algorithm": "eagle3", "speculative_eagle_topk": 2, "speculative_num_steps": 2}
    sglang_method_on_vllm = {"speculative_algorithm": "EAGLE3", "speculative_num_steps": 2}

    assert launch_fields.field_conflicts("vllm", sglang_topk_on_vllm)[0][0] == "speculative_eagle_topk"
    assert "knows no method 'EAGLE3'" in launch_fields.field_conflicts("vllm", sglang_method_on_vllm)[0][1]
    assert launch_fields.refusals("vllm", {"engine_options": {"speculative_eagle_topk": 1}}) == [
        "vLLM has no option speculative_eagle_topk (its options: draft_tensor_parallel_size, draft_max_model_len, "
        "prompt_lookup_min, prompt_lookup_max, suffix_decoding_max_tree_depth, suffix_decoding_max_cached_requests)"
    ]
    assert launch_fields.refusals("trt", {}) == ["engine must be one of sglang, vllm, not 'trt'"]
    draft_tp = {"speculative_algorithm": "eagle3", "speculative_draft_model_path": "/d", "speculative_num_steps": 2,
                "tp_size": 8, "engine_options": {"draft_tensor_parallel_size": 4}}  # fmt: skip
    assert (
        "cannot be other value than 1 or target model tensor_parallel_size (8)"
        in (launch_fields.field_conflicts("vllm", draft_tp)[0][1])
    )


def test_an_imported_chain_is_filed_under_vllms_names_and_a_tree_is_left_for_the_rules_to_refuse():
    chain = {"speculative_algorithm": "EAGLE3", "speculative_num_steps": 3, "speculative_eagle_topk": 1,
             "speculative_num_draft_tokens": 4, "tp_size": 8}  # fmt: skip
    tree = {**chain, "speculative_eagle_topk": 4, "speculative_num_draft_tokens": 8}

    assert launch_fields.sglang_spec_as("vllm", chain) == {
        "speculative_algorithm": "eagle3", "speculative_num_steps": 3, "tp_size": 8, "engine": "vllm"
    }  # fmt: skip
    kept = launch_fields.sglang_spec_as("vllm", tree)
    assert kept["speculative_eagle_topk"] == 4
    assert launch_fields.field_conflicts("vllm", kept)[0][0] == "speculative_eagle_topk"
    assert launch_fields.sglang_spec_as("sglang", chain) == chain
