"""What an importer states that a result file does not say (formats/imported_results/common.py: GIVEN, read_given,
Given): the same names for every format; the file's own value wins; a given value that contradicts the file is
refused naming both; where neither says what a config needs, the refusal says what to add."""

from __future__ import annotations

import json

import pytest

from experiments.formats import imported_results
from experiments.formats.imported_results import GIVEN, Given, ResultFileError, parse, read_given

from .test_imports import BASELINE, EAGLE3, VLLM, _line, _with


def test_every_format_takes_the_same_given_names():
    assert GIVEN == ("model_path", "engine", "tp_size", "speculative_algorithm", "speculative_draft_model_path",
                     "speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens",
                     "concurrency")  # fmt: skip
    assert set(imported_results.GIVEN_FLAGS) == set(GIVEN)


@pytest.mark.parametrize(
    ("mapping", "message"),
    [
        ({"trust_remote_code": True}, "given.trust_remote_code: not something an import states"),
        ({"tp_size": "8"}, "given.tp_size: a whole number of at least 1"),
        ({"tp_size": True}, "given.tp_size: a whole number of at least 1"),
        ({"concurrency": 0}, "given.concurrency: a whole number of at least 1"),
        ({"engine": "tgi"}, "given.engine: one of sglang, vllm, tensorrt-llm, lmdeploy, other"),
        ({"model_path": "x" * 513}, "given.model_path: text of at most 512 characters"),
        ({"model_path": 7}, "given.model_path: text of at most 512 characters"),
    ],
)
def test_a_given_field_of_the_wrong_kind_is_refused_by_its_name(mapping, message):
    errors: list[str] = []

    given = read_given(mapping, errors)

    assert len(errors) == 1 and errors[0].startswith(message) and given == Given()


def test_it_reads_what_is_given_and_none_as_no_speculation():
    errors: list[str] = []

    given = read_given({"model_path": " /models/m ", "engine": "SGLang", "speculative_algorithm": "none",
                        "tp_size": 2, "concurrency": None}, errors)  # fmt: skip

    assert errors == []
    assert given == Given(model_path="/models/m", engine="sglang", speculative_algorithm="", tp_size=2)


def test_a_null_server_info_takes_the_given_model_and_settings():
    content = _with(_with(EAGLE3, 0, server_info=None), 1, server_info=None)
    given = {"model_path": "/models/kimi", "tp_size": 8, "speculative_algorithm": "EAGLE3",
             "speculative_num_steps": 2, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 3}  # fmt: skip

    (stated,) = parse(content, imported_results.SGLANG, given)

    assert stated.server.model_path == "/models/kimi" and stated.server.tp_size == 8
    assert stated.server.speculative["speculative_num_steps"] == 2
    assert stated.server.given == {"model_path", "tp_size", "speculative_algorithm", "speculative_num_steps",
                                   "speculative_eagle_topk", "speculative_num_draft_tokens"}  # fmt: skip
    # Where a line has its server_info, what it says wins: the given model (another one) is refused there.
    with pytest.raises(ResultFileError) as refused:
        parse(_with(content, 1, server_info={**_line(EAGLE3, 1)["server_info"], "tp_size": 4}), "auto", given)
    assert refused.value.errors == [
        "line 2: server_info.model_path: the file says '/models/kimi-k2.5-sim', but given model_path (`model_path` / "
        "--model) says '/models/kimi'; leave model_path out (the file's own value is used) or import another file",
        "line 2: server_info.tp_size: the file says 4, but given tp_size (`tp_size` / --tp-size) says 8; leave tp_size "
        "out (the file's own value is used) or import another file",
    ]


def test_the_file_wins_where_it_says_the_same_and_a_contradiction_names_both():
    (run,) = parse(BASELINE, "auto", {"model_path": "/models/kimi-k2.5-sim/", "tp_size": 8})
    assert run.server.model_path == "/models/kimi-k2.5-sim" and run.server.given == frozenset()

    with pytest.raises(ResultFileError) as refused:
        parse(BASELINE, "auto", {"speculative_algorithm": "EAGLE3"})
    assert refused.value.errors[0] == (
        "line 1: server_info.speculative_algorithm: the file says NONE, but given speculative_algorithm "
        "(`speculative_algorithm` / --speculative-algorithm) says 'EAGLE3'; leave speculative_algorithm out (the "
        "file's own value is used) or import another file"
    )
    with pytest.raises(ResultFileError) as refused:
        parse(BASELINE, "auto", {"speculative_num_steps": 3})
    assert (
        "the file says the server did not speculate, but given states speculative settings" in refused.value.errors[0]
    )
    with pytest.raises(ResultFileError, match="line 1: max_concurrency: the file says 1, but given concurrency"):
        parse(BASELINE, "auto", {"concurrency": 4})


def test_a_vllm_file_takes_the_same_given_fields():
    row = json.loads(VLLM)
    del row["model_id"]

    with pytest.raises(ResultFileError) as refused:
        parse(json.dumps(row))
    (run,) = parse(json.dumps(row), "auto", {"model_path": "/models/kimi", "tp_size": 2, "engine": "vllm"})

    assert refused.value.errors == ["line 1: model_id: missing (the file does not name the served model): state the "
                                    "served model's path with `model_path` / --model"]  # fmt: skip
    assert run.server.model_path == "/models/kimi" and run.server.tp_size == 2 and run.engine == "vllm"
    with pytest.raises(ResultFileError, match="line 1: backend: the file says 'vllm', but given engine"):
        parse(json.dumps(row), "auto", {"model_path": "/models/kimi", "engine": "sglang"})


def test_the_cli_has_a_flag_for_each_given_field_named_as_the_refusals_name_it():
    from experiments.cli import imports, main

    values = {"--model": "/m", "--engine": "sglang", "--speculative-algorithm": "EAGLE3", "--draft-model": "/d"}
    argv = ["import", "f.jsonl"]
    for flag in imported_results.GIVEN_FLAGS.values():
        argv += [flag, values.get(flag, "2")]

    args = main.build_parser().parse_args(argv)

    assert set(imports.stated_server(args)) == set(GIVEN)
