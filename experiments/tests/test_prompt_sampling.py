"""Prompt sets as data: uploads, the ShareGPT file (whole or cut off), and bench_serving's sampling."""

from __future__ import annotations

import json
import random

import pytest

from experiments.formats import prompt_sampling as ps
from experiments.formats.prompt_sampling import Conversation, PromptSetError


def _words(n: int, word: str = "w") -> str:
    return " ".join([word] * n)


def test_it_reads_jsonl_prompts_and_conversations_with_categories():
    data = (
        json.dumps({"prompt": "write a sort in C", "category": "code"})
        + "\n\n"
        + json.dumps({"conversations": [{"from": "human", "value": "hi there"}, {"from": "gpt", "value": "hello you"}]})
        + "\n"
        + json.dumps({"messages": [{"role": "user", "content": "2+2?"}], "category": "math"})
    ).encode()

    conversations = ps.parse_upload(data)

    assert conversations == [
        Conversation(("write a sort in C",), "code"),
        Conversation(("hi there", "hello you"), "general"),
        Conversation(("2+2?",), "math"),
    ]


def test_it_reads_a_json_list():
    data = json.dumps([{"prompt": "a b c"}, {"conversations": ["x y", "z z"], "category": "chat"}]).encode()
    assert ps.parse_upload(data) == [Conversation(("a b c",)), Conversation(("x y", "z z"), "chat")]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b'{"prompt": "ok"}\n{"prompt": 3}\n', 'line 2: "prompt" must be non-empty text'),
        (b'{"prompt": "ok"}\nnot json\n', "line 2: not valid JSON"),
        (b'[{"prompt": "ok"}, {"text": "x"}]', 'item 2: expected an object with "prompt" or "conversations"'),
        (b'{"prompt": "ok", "category": ""}', 'line 1: "category" must be a non-empty string'),
        (b'{"conversations": [{"from": "human"}]}', "line 1, conversations[0]: a turn is text or an object"),
        (b'{"conversations": []}', 'line 1: "conversations" must be a non-empty list'),
        (b"", "The file is empty."),
        (b"\xff\xfe", "not UTF-8"),
        (b'{"a": 1}', 'line 1: expected an object with "prompt"'),
    ],
)
def test_it_names_the_line_and_field_of_a_bad_upload(data, message):
    with pytest.raises(PromptSetError, match=None) as caught:
        ps.parse_upload(data)
    assert message in str(caught.value)


def test_it_bounds_an_upload(monkeypatch):
    monkeypatch.setattr(ps, "MAX_PROMPTS", 3)
    with pytest.raises(PromptSetError, match="more than 3 prompts"):
        ps.parse_upload(b'{"prompt": "a"}\n' * 4)
    too_long = json.dumps({"prompt": "x" * (ps.MAX_TURN_CHARS + 1)}).encode()
    with pytest.raises(PromptSetError, match="at most 100000"):
        ps.parse_upload(too_long)
    with pytest.raises(PromptSetError, match="bytes; at most"):
        ps.parse_upload(b" " * (ps.MAX_UPLOAD_BYTES + 1))


def _sharegpt(records: list[dict]) -> str:
    return json.dumps(records, indent=2)


def test_it_reads_sharegpt_first_two_turns_and_says_when_the_file_is_cut_off():
    records = [
        {"id": "a", "conversations": [{"from": "human", "value": "def f(): pass fix"}, {"from": "gpt", "value": "ok"}]},
        {"id": "b", "conversations": [{"from": "human", "value": "only one turn"}]},
        {"id": "c", "conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}, {"value": "x"}]},
    ]
    whole = _sharegpt(records)

    conversations, truncated = ps.read_sharegpt(whole)
    assert not truncated
    assert conversations == [Conversation(("def f(): pass fix", "ok"), "code"), Conversation(("q", "a"), "chat")]

    cut = whole[: whole.index('"id": "c"') + 12]
    conversations, truncated = ps.read_sharegpt(cut)
    assert truncated
    assert conversations == [Conversation(("def f(): pass fix", "ok"), "code")]


def test_it_samples_in_bench_servings_order_with_its_pruning_and_the_caps():
    conversations = [
        Conversation((_words(5), _words(7)), "chat"),  # kept: output 7 capped to 6
        Conversation(("one", _words(9)), "chat"),  # prompt of 1 token: pruned
        Conversation((_words(3), "x"), "code"),  # completion of 1 token: pruned
        Conversation((_words(11), _words(4)), "code"),  # prompt above the input cap: skipped
        Conversation((_words(4),), "math"),  # no reference completion: the output cap
        Conversation((_words(2), _words(3)), "code"),
    ]
    seed = 7
    # bench_serving: random.seed(seed); random.shuffle(dataset); walk, pruning, until the count.
    random.seed(seed)
    expected_order = list(range(len(conversations)))
    random.shuffle(expected_order)

    sample = ps.sample(conversations, 10, seed, input_cap=10, output_cap=6)

    kept = [i for i in expected_order if i in (0, 4, 5)]
    assert [p.index for p in sample] == kept
    by_index = {p.index: p for p in sample}
    assert (by_index[0].input_len, by_index[0].output_len) == (5, 6)
    assert (by_index[4].input_len, by_index[4].output_len, by_index[4].category) == (4, 6, "math")
    assert by_index[5].output_len == 3
    assert ps.sample(conversations, 2, seed, 10, 6) == sample[:2]
    assert ps.sample(conversations, 10, seed + 1, 10, 6) != sample or len(sample) < 2


def test_it_names_a_sample_by_its_content():
    sample = ps.sample([Conversation(("a b", "c d"))], 1, 1, 10, 10)
    data = ps.sample_bytes(sample)
    assert json.loads(data.splitlines()[0]) == {
        "index": 0,
        "text": "a b",
        "category": "general",
        "input_len": 2,
        "output_len": 2,
    }
    assert ps.sample_hash(data) == ps.sample_hash(bytes(data))
    assert ps.sample_hash(data) != ps.sample_hash(ps.sample_bytes(ps.sample([Conversation(("a b", "c"))], 1, 1, 9, 9)))


@pytest.mark.parametrize(
    ("prompt", "category"),
    [("```python\nprint(1)```", "code"), ("Solve the equation x+1=2", "math"), ("Tell me about Rome", "chat")],
)
def test_it_categorises_sharegpt_prompts(prompt, category):
    assert ps.categorize(prompt) == category


def test_it_writes_conversations_as_a_sharegpt_file_that_reads_back_the_same():
    conversations = [
        Conversation(('write a "quicksort" in C', "void quicksort(int *xs) {}"), "code"),
        Conversation(("hello", "hi there", "a third turn"), "general"),
    ]

    data = ps.sharegpt_bytes(conversations)
    read, truncated = ps.read_sharegpt(data.decode())

    assert not truncated
    assert [c.turns for c in read] == [c.turns[:2] for c in conversations]  # bench_serving reads two turns
    assert json.loads(data)[1]["conversations"][0] == {"from": "human", "value": "hello"}
