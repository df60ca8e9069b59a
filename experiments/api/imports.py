"""Imports: runs measured outside specdash (result files of bench_serving, vllm bench serve) filed as imported runs."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from django.http import HttpRequest
from ninja import Status
from ninja.errors import HttpError

from experiments.analysis import slo
from experiments.formats import imported_results
from experiments.formats.imported_results import ImportedFile

from ..actions.audit import Actor
from ..actions.imports import ImportOutcome, do_import_runs
from ..forms import imports as import_forms
from ..forms.hosted_configs import ImportRefused, imported_configs
from ..forms.profiles import BenchmarkProfileForm
from ..models import Experiment, Host, Run
from .base import api, require, require_manage
from .bodies import IMPORT_FORMATS, MAX_IMPORT_FILE_CHARS, MAX_IMPORT_FILE_NAME, MAX_IMPORT_FILES, ImportIn
from .refusals import documented, refused, responses, status_of

MAX_FILES = MAX_IMPORT_FILES
MAX_FILE_CHARS = MAX_IMPORT_FILE_CHARS
MAX_FILE_NAME = MAX_IMPORT_FILE_NAME
EXPERIMENT_NAME_MAX = 200
FORMATS = IMPORT_FORMATS


@api.post("/imports", response=responses(200, 201, 400, 409), openapi_extra=documented(400, 403, 404, 409))
def import_results(request: HttpRequest, body: ImportIn):
    """`{"experiment"?: id, "name"?, "host"?: name, "files"?: [{"name", "format"?: auto | sglang-bench-serving |
    vllm-bench-serve | specforge-benchmark, "content": "<the file's text>", "given"?: {...}, "measured_at"?}],
    "archive"?: {"name", "content_base64", "format"?, "given"?}}`: every file (and every result file of the .zip or
    .tar.gz archive) is read and checked first; one error anywhere (named `files[i]`, `archive[<path>]`, with the
    line and the field) and nothing is written.
    `given` states what a file does not say, by the same names for every format (`model_path`, `engine`,
    `tp_size`, the speculative settings, `concurrency`): the file's own value wins, and a given value that
    contradicts it is refused naming both. Each server a file measured becomes a config checked as a submitted one
    on the experiment's host (the config's field rules, models under the host's models root, tp within its GPUs):
    one refused, the import is refused, naming the file, the field and where it is stated
    (`files[i].model_path`), with the submission's status. A new import makes one experiment per request shape
    (`experiments`); an import into an experiment takes only runs of its profile's shape (409 otherwise). Each run
    is placed in history when it was measured (the file's date, else `measured_at` or the member's mtime, else
    now), and the history checks run over it. A file imported before (the same bytes) is skipped and listed under
    `skipped`: 200 when nothing was new, 201 otherwise."""
    require(request, "experiments.add_experiment")
    payload = body.model_dump(exclude_unset=True)
    errors: dict[str, list[str]] = {}
    experiment, host = _target(request, payload, errors)
    name = payload.get("name") or ""
    if not isinstance(name, str) or len(name) > EXPERIMENT_NAME_MAX:
        errors["name"] = [f"Text of at most {EXPERIMENT_NAME_MAX} characters."]
    unreadable: set[str] = set()
    files, skipped_entries = _read_files(body, errors, unreadable)
    if errors:
        # Only files whose text cannot be read (no schema states a file format): the body's own 400.
        status = 400 if set(errors) == unreadable else 422
        return refused("invalid import", errors, status)
    objective = _objective(body)
    if isinstance(objective, dict):
        return refused("invalid import", objective, 422)
    if objective is not None and experiment is not None:
        why = "an import into an existing experiment is judged under that experiment's own SLO (set it on its profile)"
        return refused("invalid import", {"slo": [why]}, 409)
    if experiment is not None and (shapes := import_forms.shape_refusals(experiment, files)):
        return refused("invalid import: a file measured another request shape than the experiment's", shapes, 409)
    # Each config a file measured, checked as a submitted config on the host its runs are filed under.
    target = experiment.host if experiment is not None else host
    assert target is not None  # a new experiment's host was required above
    measured = [(where, f.name, f.format, [run.server for run in f.runs]) for where, f in files]
    try:
        configs = imported_configs(measured, target)
    except ImportRefused as exc:
        return refused("invalid import: a config the files measured may not launch on this host", exc.errors,
                       status_of(exc.forms))  # fmt: skip
    outcome = do_import_runs(
        actor=Actor.of(request), files=[f for _, f in files], configs=configs, experiment=experiment, name=str(name),
        host=host, objective=objective,
    )  # fmt: skip
    return Status(201 if outcome.runs else 200, _answer(outcome, skipped_entries))


def _answer(outcome: ImportOutcome, skipped_entries: list[str]) -> dict[str, Any]:
    """The experiments made or imported into, their runs, and the files skipped as imported before."""
    first = outcome.experiments[0] if outcome.experiments else None
    if first is None and outcome.skipped:
        first = outcome.skipped[0].runs[0].experiment
    runs = [_run(r) for r in outcome.runs]
    experiments = [
        {"id": e.pk, "name": e.name, "url": e.get_absolute_url(), "profile": e.profile.name,
         "runs": [r["id"] for r in runs if r["experiment"] == e.pk]}
        for e in dict.fromkeys(outcome.experiments)
    ]  # fmt: skip
    # Imported before (the same bytes): nothing of them changed.
    skipped = [
        {"file": s.name, "sha256": s.sha256, "runs": [r.pk for r in s.runs], "experiment": s.runs[0].experiment_id,
         "reason": "imported before (the same bytes): nothing changed"}
        for s in outcome.skipped
    ]  # fmt: skip
    return {
        "id": first.pk if first else None,
        "url": first.get_absolute_url() if first else None,
        "runs": runs,
        "experiments": experiments,
        "skipped": skipped,
        "archive_entries_skipped": skipped_entries[:100],  # not result files (.json, .jsonl)
    }


def _run(r: Run) -> dict[str, Any]:
    return {
        "id": r.pk,
        "experiment": r.experiment_id,
        "config": r.config.name,
        "config_id": r.config_id,
        "state": r.state,
        "imported_from": r.imported_from,
        "measured_at": r.finished_at.isoformat() if r.finished_at else None,
        "measurements": len(r.imported_from["lines"]) if r.imported_from else 0,
        "url": r.get_absolute_url(),
    }


def _objective(body: ImportIn) -> slo.Slo | dict[str, list[str]] | None:
    """The SLO a new experiment's cells are judged under, or the errors naming its fields."""
    if body.slo is None:
        return None
    given = body.slo
    errors: dict[str, list[str]] = {}
    if given.metric not in slo.METRICS:
        errors["slo.metric"] = [f"One of {', '.join(slo.METRICS)}."]
    if given.percentile not in slo.PERCENTILES:
        errors["slo.percentile"] = [f"One of {', '.join(slo.PERCENTILES)}."]
    low, high = BenchmarkProfileForm.LIMITS["slo_limit_ms"]
    if not low <= given.limit_ms <= high:
        errors["slo.limit_ms"] = [f"A number of milliseconds from {low} to {high:g}."]
    return errors or slo.Slo(given.metric, given.percentile, given.limit_ms)


def _target(
    request: HttpRequest, payload: dict[str, Any], errors: dict[str, list[str]]
) -> tuple[Experiment | None, Host | None]:
    """The existing experiment to import into (the caller must manage it), or the host of a new one."""
    experiment_id = payload.get("experiment")
    if experiment_id is not None:
        if isinstance(experiment_id, bool) or not isinstance(experiment_id, int):
            errors["experiment"] = ["An experiment id (a number)."]
            return None, None
        experiment = Experiment.objects.select_related("host").filter(pk=experiment_id).first()
        if experiment is None:
            raise HttpError(404, f"experiment: no experiment with id {experiment_id}")
        require_manage(request, experiment)
        return experiment, None
    host_name = payload.get("host")
    if not isinstance(host_name, str) or not host_name:
        errors["host"] = ["A new experiment needs the name of a registered host (or give an experiment id)."]
        return None, None
    # A NUL names no host (PostgreSQL cannot hold one in a text): never sent to it.
    host = None if "\x00" in host_name else Host.objects.filter(name=host_name[:MAX_FILE_NAME]).first()
    if host is None:
        raise HttpError(404, f"host: no host named {host_name[:80]!r}")
    return None, host


def _read_files(
    body: ImportIn, errors: dict[str, list[str]], unreadable: set[str]
) -> tuple[list[tuple[str, ImportedFile]], list[str]]:
    """The files read (each with where it is in the body), and the archive's entries that are not result files."""
    items = [
        (f"files[{i}]", import_forms.FileIn(item.name, item.content, item.format or imported_results.AUTO, item.given,
                                            item.measured_at))
        for i, item in enumerate(body.files)
    ]  # fmt: skip
    read = import_forms.read_files(items, errors, unreadable)
    skipped: list[str] = []
    if body.archive is not None:
        archive = body.archive
        try:
            data = base64.b64decode(archive.content_base64, validate=True)
        except (binascii.Error, ValueError):
            errors["archive.content_base64"] = ["The archive's bytes in base64."]
            return read, skipped
        members, skipped = import_forms.read_archive(
            "archive", archive.name, data, errors, unreadable, fmt=archive.format or imported_results.AUTO,
            given=archive.given,
        )  # fmt: skip
        read += [(f"archive[{f.name[len(archive.name) + 1 :][:80]}]", f) for f in members]
    if not body.files and body.archive is None:
        errors["files"] = ["At least one file: [{name, format?, content}], or an archive."]
    return read, skipped
