"""An adaptive schedule with its verification's checks, as `GET /api/schedules/{id}` shows it."""

from __future__ import annotations

import json
from typing import Any

from django.urls import reverse

from experiments import analysis
from experiments.formats import vllm_k_schedule
from experiments.models import AdaptiveSchedule
from experiments.reads.schedules import ScheduleView


def schedule_json(view: ScheduleView) -> dict[str, Any]:
    s = view.schedule
    verification = s.verification
    return {
        "id": s.pk,
        "url": s.get_absolute_url(),
        "json_url": reverse("schedule_download", args=[s.pk]),
        "version": s.version,
        "digest": s.digest,
        "study": s.study_id,
        "experiment": s.experiment_id,
        "config": json.loads(s.config_json),
        "notes": s.notes,
        "bands": s.bands,
        "precision": {"within": s.tolerance, "confidence": analysis.CONFIDENCE},
        "verification": None
        if verification is None
        else {"id": verification.pk, "url": verification.get_absolute_url(), "status": view.status},
        "verdict": view.verdict,
        "sentence": view.sentence,
        "checks": [vars(c) for c in view.checks],
        "previous": None if view.previous is None else view.previous.pk,
        "diff": view.diff,
        "created_by": s.created_by.get_username() if s.created_by else None,
        "created_at": s.created_at.isoformat(),
    }


def vllm_k_schedule_json(schedule: AdaptiveSchedule) -> dict[str, Any]:
    """A schedule's bands as vLLM 0.33+ takes a K per batch size (`formats.vllm_k_schedule`), with what it guessed."""
    k_schedule = vllm_k_schedule.from_bands(schedule.bands)
    return {**k_schedule.speculative_config(), "notes": k_schedule.notes}
