"""Imports: runs measured outside specdash (result files of bench_serving, vllm bench serve) filed as imported runs."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Status
from ninja.errors import HttpError

from experiments.analysis import slo
from experiments.formats import imported_results

from ..actions.audit import Actor
from ..actions.imports import ImportedFile, do_import_runs
from ..forms.hosted_configs import ImportRefused, imported_configs
from ..forms.profiles import BenchmarkProfileForm
from ..models import Experiment, Host
from .base import api, require, require_manage
from .bodies import IMPORT_FORMATS, MAX_IMPORT_FILE_CHARS, MAX_IMPORT_FILE_NAME, MAX_IMPORT_FILES, ImportIn
from .refusals import documented, refused, responses, status_of

MAX_FILES = MAX_IMPORT_FILES
MAX_FILE_CHARS = MAX_IMPORT_FILE_CHARS
MAX_FILE_NAME = MAX_IMPORT_FILE_NAME
EXPERIMENT_NAME_MAX = 200
FORMATS = IMPORT_FORMATS


@api.post("/imports", response=responses(201, 400, 409), openapi_extra=documented(400, 403, 404, 409))
def import_results(request: HttpRequest, body: ImportIn):
    """`{"experiment"?: id, "name"?, "host"?: name, "files": [{"name", "format"?: auto | sglang-bench-serving |
    vllm-bench-serve | specforge-benchmark, "content": "<the file's text>", "given"?: {...}}]}`: every file is read
    and checked first; one error anywhere (named `files[i]`, with the line and the field) and nothing is written.
    A SpecForge file names neither its model nor its concurrency: `given` states them (`model_path`,
    `concurrency`, and optionally `tp_size` and the speculative settings), as the specforge command line had them.
    Each server a file measured becomes a config checked as a submitted one on the experiment's host (the config's
    field rules, models under the host's models root, tp within its GPUs): one refused, the import is refused,
    naming the file, the field and where the file states it (`files[i].model_path`), with the submission's status."""
    require(request, "experiments.add_experiment")
    payload = body.model_dump(exclude_unset=True)
    errors: dict[str, list[str]] = {}
    experiment, host = _target(request, payload, errors)
    name = payload.get("name") or ""
    if not isinstance(name, str) or len(name) > EXPERIMENT_NAME_MAX:
        errors["name"] = [f"Text of at most {EXPERIMENT_NAME_MAX} characters."]
    unreadable: set[str] = set()
    files = _read_files(payload.get("files"), errors, unreadable)
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
    # Each config a file measured, checked as a submitted config on the host its runs are filed under.
    target = experiment.host if experiment is not None else host
    assert target is not None  # a new experiment's host was required above
    measured = [(f"files[{i}]", f.name, f.format, [run.server for run in f.runs]) for i, f in enumerate(files)]
    try:
        configs = imported_configs(measured, target)
    except ImportRefused as exc:
        return refused("invalid import: a config the files measured may not launch on this host", exc.errors,
                       status_of(exc.forms))  # fmt: skip
    experiment, runs = do_import_runs(
        actor=Actor.of(request), files=files, configs=configs, experiment=experiment, name=str(name), host=host,
        objective=objective,
    )  # fmt: skip
    return Status(
        201,
        {
            "id": experiment.pk,
            "url": experiment.get_absolute_url(),
            "runs": [
                {
                    "id": r.pk,
                    "config": r.config.name,
                    "config_id": r.config_id,
                    "state": r.state,
                    "imported_from": r.imported_from,
                    "measurements": len(r.imported_from["lines"]) if r.imported_from else 0,
                    "url": r.get_absolute_url(),
                }
                for r in runs
            ],
        },
    )


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
    host = Host.objects.filter(name=host_name[:MAX_FILE_NAME]).first()
    if host is None:
        raise HttpError(404, f"host: no host named {host_name[:80]!r}")
    return None, host


def _read_files(value: Any, errors: dict[str, list[str]], unreadable: set[str]) -> list[ImportedFile]:
    """The files read; each refused one's errors under `files[i]`, whose key joins `unreadable` when its text (not
    a field the schema states) is what is refused."""
    if not isinstance(value, list) or not value:
        errors["files"] = ["At least one file: [{name, format?, content}]."]
        return []
    if len(value) > MAX_FILES:
        errors["files"] = [f"At most {MAX_FILES} files at once."]
        return []
    files = []
    for i, item in enumerate(value):
        where = f"files[{i}]"
        if not isinstance(item, dict):
            errors[where] = ["An object {name, format?, content}."]
            continue
        name, fmt, content = item.get("name"), item.get("format") or imported_results.AUTO, item.get("content")
        given = item.get("given") or {}  # what the format does not hold (SpecForge: model_path, concurrency, ...)
        problems = []
        if not isinstance(given, dict) or len(given) > len(imported_results.SPECFORGE_GIVEN):
            problems.append(f"given: an object of at most: {', '.join(imported_results.SPECFORGE_GIVEN)}")
            given = {}
        if not isinstance(name, str) or not name.strip() or len(name) > MAX_FILE_NAME:
            problems.append(f"name: a file name of at most {MAX_FILE_NAME} characters")
        if fmt not in FORMATS:
            problems.append(f"format: one of {', '.join(FORMATS)}")
        if not isinstance(content, str):
            problems.append("content: the file's text is required")
        elif len(content) > MAX_FILE_CHARS:
            problems.append(f"content: at most {MAX_FILE_CHARS} characters are accepted")
        if problems:
            errors[where] = problems
            continue
        assert isinstance(name, str) and isinstance(content, str)
        detected = imported_results.detect(content) if fmt == imported_results.AUTO else fmt
        try:
            runs = imported_results.parse(content, detected, given)
        except imported_results.ResultFileError as exc:
            errors[where] = [f"{name[:80]}: {message}" for message in exc.errors]
            unreadable.add(where)
            continue
        files.append(ImportedFile(name=name.strip(), format=detected, runs=runs))
    return files
