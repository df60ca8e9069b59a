"""A draft training directory in SpecForge's layout, read from a listing of it and its small text files (pure).

Facts (SpecForge, `specforge/training/checkpoint.py`, and specdash's reference speculative-observability.md d5):
- a checkpoint is `{output_dir}/{run_id}-step{N}/` holding `training_state.pt` (rank 0's shared payload; a
  checkpoint without it is incomplete, and SpecForge itself skips it) plus `training_state_rank{r}.pt` per rank;
- beside them the run's links `{run_id}-latest` and `{run_id}-best`, written relative (the step dir's bare name);
- `{run_id}.best_meta.json`: `{"run_id", "step", "score", "metric", "metrics"}`, `metrics` being the best step's
  eval metrics as the evaluator returns them (`eval/avg_loss`, `eval/avg_acc`, `eval/per_position_acc` (a list),
  `eval/simulated_acc_len`); SpecForge ignores a meta whose run_id differs or whose checkpoint is gone;
- `eval/simulated_acc_len` is the geometric sum of per-position accuracy, without the bonus token: + 1 is the
  served accept length's definition (per request, averaged), `served_definition` below.
Guesses, where SpecForge is silent (each said again where it is used):
- per-step eval metrics: SpecForge logs them only to its trackers (wandb, tensorboard `runs/`, swanlab, mlflow), so
  on disk they are `{run_id}.eval_metrics.jsonl` when a team writes them there: one JSON object per line with an
  integer `step` and the `eval/*` keys (a list as `eval/per_position_acc`, or expanded as its trackers log it,
  `eval/per_position_acc/0`, ...);
- which draft directory was exported from which step: `specforge export --to sglang --output-dir D` writes
  `save_pretrained`'s files and records no provenance, so a draft dir counts as step N's export when its name is
  `{run_id}-step{N}` followed by `-`, `_` or `.` and a suffix, and it holds a config.json, in the models root or
  in the training directory itself;
- the draft model config a run was trained with (`--draft-model-config`, the JSON `specforge export --draft-config`
  needs): SpecForge keeps no copy beside the checkpoints, so a team that lets specdash export keeps one as
  `{run_id}.draft_config.json` in the training directory (a regular file; a link is not followed).

Nothing here guesses past that: an entry whose name leaves the allowed characters, a link that is not a sibling's
bare name, a non-numeric step, a file too big to read, a best_meta that disagrees with the -best link, is skipped
or refused with its reason.

Long module: the listing, the links, best_meta and the metrics file are one layout's rules, each refusing what the
others rely on; split, every part would re-check the names the others already allowed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import bounded_json

STATE_FILE = "training_state.pt"
BEST_METRIC = "eval/simulated_acc_len"
# The small files read, and the most of each: SpecForge's best_meta is a few hundred bytes; a metrics file of
# thousands of evals stays under a MiB.
MAX_META_BYTES = 64 * 1024
MAX_METRICS_BYTES = 1024 * 1024
MAX_METRICS_LINES = 20_000
MAX_ENTRIES = 20_000
MAX_RUNS = 8
MAX_SKIPPED = 200
MAX_METRIC_KEYS = 32
MAX_POSITIONS = 64
# Names allowed by list: what SpecForge's run ids and step dirs are made of (a run id is the config's own name).
NAME = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._+-]{0,199}\Z")
CHECKPOINT = re.compile(r"\A(?P<run>.+)-step(?P<step>[^/]*)\Z")
RANK_FILE = re.compile(r"\Atraining_state_rank(?P<rank>[0-9]{1,6})\.pt\Z")
LINK = re.compile(r"\A(?P<run>.+)-(?P<which>latest|best)\Z")
META = re.compile(r"\A(?P<run>.+)\.best_meta\.json\Z")
METRICS = re.compile(r"\A(?P<run>.+)\.eval_metrics\.jsonl\Z")
DRAFT_CONFIG = re.compile(r"\A(?P<run>.+)\.draft_config\.json\Z")
METRIC_KEY = re.compile(r"\Aeval/[A-Za-z0-9_]{1,64}(/[0-9]{1,3})?\Z")
EXPORT_SEPARATORS = "-_."
# SpecForge's own tracker directory (tensorboard's event files): binary, not read.
TRACKER_DIRS = frozenset({"runs", "swanlog", "mlruns", "wandb"})
_SHOWN = 80


@dataclass(frozen=True)
class Entry:
    """One line of the listing: `kind` as find's %y prints it (d, f, l, ...), `size` in bytes, `path` relative to
    the training directory (one or two components), `target` a link's target as written ("" otherwise)."""

    kind: str
    size: int
    path: str
    target: str = ""


@dataclass(frozen=True)
class Skipped:
    name: str  # shown as ascii() writes it, cut: a name may hold a newline or worse
    reason: str


@dataclass(frozen=True)
class Checkpoint:
    step: int
    path: str
    rank_files: int
    size_bytes: int
    is_latest: bool = False
    is_best: bool = False
    exports: tuple[str, ...] = ()  # draft directories exported from it (absolute paths), servable as drafts
    metrics: Mapping[str, Any] = field(default_factory=dict)  # eval/* as recorded for this step; {} when none

    @property
    def simulated_acc_len(self) -> float | None:
        value = self.metrics.get(BEST_METRIC)
        return float(value) if isinstance(value, int | float) else None

    @property
    def served_definition(self) -> float | None:
        """`eval/simulated_acc_len` + 1: on the served accept length's definition (bonus token counted)."""
        value = self.simulated_acc_len
        return None if value is None else value + 1


@dataclass(frozen=True)
class TrainingRun:
    run_id: str
    checkpoints: tuple[Checkpoint, ...]  # by step
    latest_step: int | None
    best_step: int | None
    best_metric: str | None = None
    best_score: float | None = None
    problems: tuple[str, ...] = ()  # about the run's links and files, each with its reason
    draft_config: str | None = None  # absolute path of `{run_id}.draft_config.json`, what an export needs


@dataclass(frozen=True)
class TrainingDirectory:
    path: str
    runs: tuple[TrainingRun, ...]
    skipped: tuple[Skipped, ...]
    problems: tuple[str, ...] = ()  # about the directory as a whole (a listing cut short)


def shown(name: str) -> str:
    text = ascii(name)[1:-1]
    return text if len(text) <= _SHOWN else text[: _SHOWN - 1] + "…"


# ---- the listing as find prints it ---------------------------------------------------------------------------------


def parse_listing(raw: bytes, *, cut: bool = False) -> tuple[list[Entry], list[Skipped], list[str]]:
    """Entries of `find . -mindepth 1 -maxdepth 2 -printf '%y\\0%s\\0%P\\0%l\\0'` (four NUL-ended fields per entry:
    a name cannot hold NUL, so no name can forge an entry). `cut`: the host cut the answer at its byte cap, so the
    last entry may be partial and is dropped. Returns the entries, the ones skipped with why, and problems."""
    fields = raw.split(b"\0")
    problems = []
    complete = len(fields) - 1  # the text ends with NUL: the last split is empty, or the partial tail
    if fields[-1] or cut:
        problems.append("the listing was cut at its size cap: entries past it are not shown")
    entries: list[Entry] = []
    skipped: list[Skipped] = []
    for start in range(0, complete - complete % 4, 4):
        if len(entries) >= MAX_ENTRIES:
            problems.append(f"more than {MAX_ENTRIES} entries: the rest are not read")
            break
        kind_b, size_b, path_b, target_b = fields[start : start + 4]
        try:
            kind, size, path, target = kind_b.decode(), int(size_b), path_b.decode(), target_b.decode()
        except (UnicodeDecodeError, ValueError):
            skipped.append(Skipped(shown(path_b.decode("utf-8", "replace")), "not UTF-8 text, or no size"))
            continue
        entries.append(Entry(kind, size, path, target))
    if complete % 4 and not problems:
        problems.append("the listing ends inside an entry")
    return entries, skipped, problems


def parse_config_listing(raw: bytes) -> list[str]:
    """Names of the directories holding a config.json, from `find . -mindepth 2 -maxdepth 2 -name config.json
    -printf '%P\\0'` run in the models root (each `NAME/config.json`); names outside the allowed ones are left out."""
    names = []
    for item in raw.split(b"\0"):
        text = item.decode("utf-8", "replace")
        name, slash, rest = text.partition("/")
        if slash and rest == "config.json" and NAME.match(name):
            names.append(name)
    return names


def files_to_read(entries: Iterable[Entry]) -> list[tuple[str, int]]:
    """The small files the reader needs, as (name, most bytes to read): every run's best_meta.json and eval metrics
    file that the listing shows as a plain file of an allowed name within its cap (a bigger one is not read: the
    reader says so)."""
    wanted = []
    for entry in entries:
        if "/" in entry.path or entry.kind != "f" or not NAME.match(entry.path):
            continue
        if META.match(entry.path) and entry.size <= MAX_META_BYTES:
            wanted.append((entry.path, MAX_META_BYTES))
        elif METRICS.match(entry.path) and entry.size <= MAX_METRICS_BYTES:
            wanted.append((entry.path, MAX_METRICS_BYTES))
    return sorted(wanted)[: 2 * MAX_RUNS]


# ---- the directory ---------------------------------------------------------------------------------------------------


def read_training_directory(
    path: str,
    entries: Sequence[Entry],
    files: Mapping[str, str],
    *,
    models_root: str = "",
    models_root_drafts: Iterable[str] = (),
    skipped: Iterable[Skipped] = (),
    problems: Iterable[str] = (),
) -> TrainingDirectory:
    """The runs of the training directory at `path` (absolute, as the host resolved it): their checkpoints by step,
    latest and best, exports and eval metrics.

    `entries`: its listing (parse_listing); `files`: the text of the small files read (files_to_read's names; one
    absent was not read); `models_root_drafts`: names of the models root's directories holding a config.json
    (parse_config_listing), searched for exports with the training directory's own."""
    skip = list(skipped)
    tops: dict[str, Entry] = {}
    inside: dict[str, list[Entry]] = {}
    for entry in entries:
        parts = entry.path.split("/")
        if len(parts) > 2 or not all(NAME.match(part) for part in parts):
            skip.append(Skipped(shown(entry.path), "name outside the allowed characters (letters, digits, . _ + -)"))
        elif len(parts) == 1:
            tops[entry.path] = entry
        else:
            inside.setdefault(parts[0], []).append(entry)

    checkpoints: dict[str, dict[int, Checkpoint]] = {}
    links: dict[str, dict[str, Entry]] = {}
    metas: dict[str, Entry] = {}
    metric_files: dict[str, Entry] = {}
    draft_configs: dict[str, str] = {}
    drafts_here = []
    for name, entry in sorted(tops.items()):
        if entry.kind == "d" and any(e.path == f"{name}/config.json" for e in inside.get(name, [])):
            drafts_here.append(name)  # an exported draft (save_pretrained's config.json), not a checkpoint
        elif match := CHECKPOINT.match(name):
            found = _checkpoint(path, name, match["step"], entry, inside.get(name, []))
            if isinstance(found, Checkpoint):
                checkpoints.setdefault(match["run"], {})[found.step] = found
            else:
                skip.append(Skipped(shown(name), found))
        elif match := LINK.match(name):
            links.setdefault(match["run"], {})[match["which"]] = entry
        elif match := META.match(name):
            metas[match["run"]] = entry
        elif match := METRICS.match(name):
            metric_files[match["run"]] = entry
        elif (match := DRAFT_CONFIG.match(name)) and entry.kind == "f":
            draft_configs[match["run"]] = f"{path.rstrip('/')}/{name}"
        elif name in TRACKER_DIRS:
            skip.append(Skipped(name, "tracker logs (binary): not read"))
        else:
            skip.append(Skipped(shown(name), "not part of SpecForge's layout"))

    run_ids = sorted(set(checkpoints) | set(links) | set(metas) | set(metric_files) | set(draft_configs))
    runs = []
    run_problems = list(problems)
    if len(run_ids) > MAX_RUNS:
        run_problems.append(f"{len(run_ids)} runs: the first {MAX_RUNS} by name are read")
    drafts = [(f"{models_root.rstrip('/')}/{name}", name) for name in models_root_drafts if models_root]
    drafts += [(f"{path.rstrip('/')}/{name}", name) for name in drafts_here]
    for run_id in run_ids[:MAX_RUNS]:
        runs.append(
            _run(
                run_id,
                checkpoints.get(run_id, {}),
                links.get(run_id, {}),
                metas.get(run_id),
                metric_files.get(run_id),
                files,
                drafts,
                draft_configs.get(run_id),
            )
        )
    return TrainingDirectory(path, tuple(runs), tuple(skip[:MAX_SKIPPED]), tuple(run_problems))


def _checkpoint(path: str, name: str, step_text: str, entry: Entry, contents: list[Entry]) -> Checkpoint | str:
    """The checkpoint dir `name`, or why it is skipped."""
    if not step_text.isascii() or not step_text.isdigit():
        return "the step is not a number"
    if len(step_text) > 12 or str(int(step_text)) != step_text:
        return "the step is not written as SpecForge writes one (no leading zeros, at most 12 digits)"
    if entry.kind != "d":
        return "not a directory (a link or a file named like a checkpoint)"
    files = {e.path.split("/", 1)[1]: e for e in contents if e.kind == "f"}
    if STATE_FILE not in files:
        return f"incomplete: no {STATE_FILE} (SpecForge skips it too)"
    ranks = [name for name in files if RANK_FILE.match(name)]
    size = sum(e.size for e in files.values())
    return Checkpoint(int(step_text), f"{path.rstrip('/')}/{name}", len(ranks), size)


def _link_step(run_id: str, which: str, link: Entry | None, steps: Mapping[int, Checkpoint]) -> tuple[int | None, str]:
    """The step `{run_id}-{which}` points at, or None and why (an empty reason: no such link)."""
    if link is None:
        return None, ""
    label = f"{run_id}-{which}"
    if link.kind != "l":
        return None, f"{label} is not a link: not read"
    if "/" in link.target or not NAME.match(link.target):
        return None, f"{label} points outside the directory ({shown(link.target)}): not followed"
    match = CHECKPOINT.match(link.target)
    if not match or match["run"] != run_id or not match["step"].isdigit() or int(match["step"]) not in steps:
        return None, f"{label} is broken: it points at {shown(link.target)}, no checkpoint of this run"
    return int(match["step"]), ""


def _run(
    run_id: str,
    steps: Mapping[int, Checkpoint],
    links: Mapping[str, Entry],
    meta_entry: Entry | None,
    metrics_entry: Entry | None,
    files: Mapping[str, str],
    drafts: Sequence[tuple[str, str]],
    draft_config: str | None = None,
) -> TrainingRun:
    problems = []
    latest, why = _link_step(run_id, "latest", links.get("latest"), steps)
    problems += [why] if why else []
    if latest is None and steps and not why:
        latest = max(steps)  # no link (a filesystem without symlinks): SpecForge's own fallback, the highest step
    best, why = _link_step(run_id, "best", links.get("best"), steps)
    problems += [why] if why else []

    meta, why = _meta(run_id, meta_entry, files)
    problems += [why] if why else []
    best_metric = best_score = None
    per_step = _metrics_by_step(run_id, metrics_entry, files, problems)
    if meta is not None:
        meta_step = meta["step"]
        if meta_step not in steps:
            problems.append(f"{run_id}.best_meta.json names step {meta_step}, whose checkpoint is gone: not used")
        elif best is not None and best != meta_step:
            problems.append(
                f"{run_id}.best_meta.json names step {meta_step} but {run_id}-best points at step {best}: "
                "no best is shown"
            )
            best = None
        else:
            best, best_metric, best_score = meta_step, meta["metric"], meta["score"]
            per_step.setdefault(meta_step, meta["metrics"])
    elif best is not None and meta_entry is None:
        problems.append(f"no {run_id}.best_meta.json: the best is the -best link's, without its score")

    checkpoints = []
    for step in sorted(steps):
        prefix = f"{run_id}-step{step}"
        exports = tuple(
            sorted(
                draft_path
                for draft_path, name in drafts
                if name.startswith(prefix) and len(name) > len(prefix) + 1 and name[len(prefix)] in EXPORT_SEPARATORS
            )
        )
        c = steps[step]
        checkpoints.append(
            Checkpoint(
                c.step,
                c.path,
                c.rank_files,
                c.size_bytes,
                is_latest=step == latest,
                is_best=step == best,
                exports=exports,
                metrics=per_step.get(step, {}),
            )
        )
    return TrainingRun(run_id, tuple(checkpoints), latest, best, best_metric, best_score, tuple(problems), draft_config)


def _meta(run_id: str, entry: Entry | None, files: Mapping[str, str]) -> tuple[dict[str, Any] | None, str]:
    name = f"{run_id}.best_meta.json"
    if entry is None:
        return None, ""
    if entry.kind != "f":
        return None, f"{name} is not a plain file: not read"
    if entry.size > MAX_META_BYTES:
        return None, f"{name} holds {entry.size} bytes, more than the {MAX_META_BYTES} read: not read"
    text = files.get(name)
    if text is None:
        return None, f"{name} could not be read"
    try:
        data = bounded_json.loads(text)
    except ValueError as exc:
        return None, f"{name} is not JSON ({exc}): not used"
    step, score, metric = (data.get(k) for k in ("step", "score", "metric")) if isinstance(data, dict) else (0, 0, 0)
    if (
        not isinstance(data, dict)
        or data.get("run_id") != run_id
        or isinstance(step, bool)
        or not isinstance(step, int)
        or not isinstance(score, int | float)
        or not _finite(score)
        or not isinstance(metric, str)
        or not METRIC_KEY.match(metric)
    ):
        return None, f"{name} lacks SpecForge's run_id, step, score and metric, or names another run: not used"
    return {"step": step, "score": float(score), "metric": metric, "metrics": _eval_metrics(data.get("metrics"))}, ""


def _metrics_by_step(
    run_id: str, entry: Entry | None, files: Mapping[str, str], problems: list[str]
) -> dict[int, dict[str, Any]]:
    """Per step, the eval metrics of `{run_id}.eval_metrics.jsonl` (a guess at a convention: SpecForge writes
    per-step metrics only to its trackers); the last line of a step wins (a resumed run evaluates it again)."""
    name = f"{run_id}.eval_metrics.jsonl"
    if entry is None:
        return {}
    if entry.kind != "f":
        problems.append(f"{name} is not a plain file: not read")
        return {}
    if entry.size > MAX_METRICS_BYTES:
        problems.append(f"{name} holds {entry.size} bytes, more than the {MAX_METRICS_BYTES} read: not read")
        return {}
    text = files.get(name)
    if text is None:
        problems.append(f"{name} could not be read")
        return {}
    by_step: dict[int, dict[str, Any]] = {}
    bad = 0
    for number, line in enumerate(text.split("\n")[:MAX_METRICS_LINES], start=1):
        if not line.strip():
            continue
        try:
            row = bounded_json.loads(line)
        except ValueError:
            row = None
        step = row.get("step") if isinstance(row, dict) else None
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            bad += 1
            if bad == 1:
                problems.append(f"{name} line {number}: not a JSON object with an integer step: skipped")
            continue
        by_step[step] = _eval_metrics(row)
    if bad > 1:
        problems.append(f"{name}: {bad} lines skipped in all")
    return by_step


def _eval_metrics(data: Any) -> dict[str, Any]:
    """The eval/* metrics of a dict: finite numbers, and per-position accuracy as one list (from a list, or from the
    `eval/per_position_acc/<i>` keys trackers log); anything else left out."""
    if not isinstance(data, dict):
        return {}
    metrics: dict[str, Any] = {}
    positions: dict[int, float] = {}
    for key, value in data.items():
        if not isinstance(key, str) or not METRIC_KEY.match(key):
            continue
        if key == "eval/per_position_acc" and isinstance(value, list):
            if all(_finite(v) for v in value[:MAX_POSITIONS]):
                metrics[key] = [float(v) for v in value[:MAX_POSITIONS]]
        elif key.startswith("eval/per_position_acc/") and _finite(value):
            index = int(key.rsplit("/", 1)[1])
            if index < MAX_POSITIONS:
                positions[index] = float(value)
        elif _finite(value) and "/" not in key[5:] and len(metrics) < MAX_METRIC_KEYS:
            metrics[key] = float(value)
    if positions and "eval/per_position_acc" not in metrics and sorted(positions) == list(range(len(positions))):
        metrics["eval/per_position_acc"] = [positions[i] for i in range(len(positions))]
    return metrics


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
