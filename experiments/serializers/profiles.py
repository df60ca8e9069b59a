"""Benchmark profiles and prompt sets."""

from __future__ import annotations

from typing import Any

from experiments.forms import BenchmarkProfileForm
from experiments.models import (
    BenchmarkProfile,
    PromptSet,
)


def profile_json(p: BenchmarkProfile) -> dict[str, Any]:
    fields = {f: getattr(p, f) for f in (*BenchmarkProfileForm.Meta.fields, "concurrency", "dataset")}
    fields["prompt_set"] = p.prompt_set_id
    return {"id": p.pk, "name": p.name, "series_key": p.series_key, **fields}


def prompt_set_json(prompt_set: PromptSet) -> dict[str, Any]:
    return {
        "id": prompt_set.pk,
        "name": prompt_set.name,
        "kind": prompt_set.kind,
        "content_hash": prompt_set.content_hash,
        "prompt_count": prompt_set.prompt_count,
        "categories": prompt_set.categories,
    }
