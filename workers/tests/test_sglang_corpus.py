"""The failure finder on real SGLang failure logs: one file per shape under corpus/, each headed by its source and
what the finder must say (kind, message substrings, the excerpt's first and last line)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from workers.engines.facts import FAILURE_KINDS
from workers.sglang import find_failure, find_usage_error

CORPUS = Path(__file__).parent / "corpus"
_FINDERS = {"find_failure": find_failure, "find_usage_error": find_usage_error}


@dataclass
class Case:
    source: str = ""
    kind: str = ""
    finder: str = "find_failure"
    messages: list[str] = field(default_factory=list)
    first: str = ""
    last: str = ""
    lines: list[str] = field(default_factory=list)


def _read(path: Path) -> Case:
    case = Case()
    lines = path.read_text(encoding="utf-8").split("\n")
    body = lines.index("# ---")
    for header in lines[:body]:
        key, _, value = header.removeprefix("# ").partition(": ")
        if key == "message":
            case.messages.append(value)
        elif key == "finder":  # it has a default: the header overrides it
            case.finder = value
        elif key in ("source", "kind", "first", "last"):
            setattr(case, key, getattr(case, key) or value)
    case.lines = lines[body + 1 :]
    return case


CASES = sorted(CORPUS.glob("*.log"))


def test_it_has_a_corpus_with_a_source_for_every_case():
    assert len(CASES) >= 12
    for path in CASES:
        case = _read(path)
        assert case.source and case.kind and case.messages and case.first and case.last, path.name


@pytest.mark.parametrize("path", CASES, ids=lambda path: path.stem)
def test_it_reads_each_real_failure_like_an_expert(path: Path):
    case = _read(path)

    failure = _FINDERS[case.finder](case.lines)

    assert failure is not None
    assert failure.kind == case.kind
    assert case.kind in (*FAILURE_KINDS, "misconfigured")
    for expected in case.messages:
        assert expected in failure.message
    assert case.lines[failure.first_line].strip() == case.first
    assert case.lines[failure.last_line].strip() == case.last


def test_it_can_store_every_kind_the_finder_names():
    from experiments.models import Run

    assert set(FAILURE_KINDS) <= set(Run.FailureKind.values)
