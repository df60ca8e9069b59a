"""Regression flags and the suspicions awaiting their confirming runs."""

from __future__ import annotations

from typing import Any

from experiments.models import (
    Flag,
    Suspicion,
)
from experiments.reads import environments


def flag_json(flag: Flag) -> dict[str, Any]:
    return {
        "id": flag.pk,
        "config": flag.config.name,
        "concurrency": flag.concurrency,
        "direction": flag.direction,
        "change": round(flag.change, 4),
        "baseline_mean": round(flag.baseline_mean, 3),
        "new_mean": round(flag.new_mean, 3),
        "kind": flag.kind,
        # What its series measure: "throughput" (tok/s; every flag before acceptance was watched) or
        # "acceptance" (accept length, tokens per verify step).
        "metric": flag.metric,
        "triage": flag.triage,
        "message": flag.message,
        "url": flag.get_absolute_url(),
        "changed_after": flag.changed_after.isoformat() if flag.changed_after else None,
        "changed_by": flag.changed_by.isoformat() if flag.changed_by else None,
        "confirmed_by_run": flag.confirmed_by_id,
        "series": [
            {
                "config": s.config.name,
                "config_hash": s.config_hash,
                "concurrency": s.concurrency,
                "category": s.category,  # "" for the whole cell; else a prompt category's acceptance
                "baseline_mean": round(s.baseline_mean, 3),
                "new_mean": round(s.new_mean, 3),
                "change": round(s.change, 4),
                "last_run_before": s.last_before_run_id,
                "first_run_after": s.change_run_id,
                "confirmed_by_run": s.confirmed_by_id,
            }
            for s in flag.series.all()
        ],
        # What changed in the environment between the last run before the change and the first after it.
        "environment_change": environments.diff_before_change(flag.run),
    }


def suspicion_json(suspicion: Suspicion) -> dict[str, Any]:
    return {
        "id": suspicion.pk,
        "state": suspicion.state,
        "run": suspicion.run_id,
        "config_hash": suspicion.config_hash,
        "confirming_runs": [r.pk for r in suspicion.confirming_runs.all() if r.config_id == suspicion.config_id],
        "flag": suspicion.flag_id,
        "series": [
            {
                "concurrency": row.concurrency,
                "metric": row.metric,
                "category": row.category,
                "change": round(row.change, 4),
                "state": row.state,
            }
            for row in suspicion.series.all()
        ],
    }
