"""A sweep: the grid of candidate configs over lists of speculative parameters (and of extra flags or environment
variables), with the base's engine's rules applied and every combination left out said why, and the launches it
costs.

Pure (no Django): the sweep form (`forms/sweeps.py`) parses what users type with `parse_numbers` and
`parse_varied`, builds the grid with `build_grid` and prices it with `estimate`; the caller hands in the seconds a
launch takes (from the host's history, or `default_launch_seconds`). Which launch fields a sweep varies is the
engine's table's (`swept_fields`): SGLang's steps, topk and draft tokens; vLLM's num_speculative_tokens alone.

vLLM (`../shared/reference/vllm-interface.md` §1.2) drafts a top-1 chain of `num_speculative_tokens` tokens and has
no topk or draft-token setting, so a sweep over a vLLM base varies that K (kept in the steps column, the steps list)
and refuses the other two lists; none of SGLang's rules below applies to it, so it skips no combination. The
methods whose speed K sets are VLLM_K_METHODS: eagle3, eagle, draft_model and mtp draft K tokens a step, ngram
proposes up to K from the prompt. `suffix` is left out: it drafts as many tokens as its suffix tree matches, K being
a ceiling only (from vLLM's source, where suffix decoding takes its depth from its own settings; the reference is
silent, so this is a guess to revisit).

The rules are those SGLang applies to the EAGLE family (EAGLE, EAGLE3, NEXTN, STANDALONE), from
`../shared/reference/sglang-interface.md` §1.3 and SGLang's source:
- topk 1: `ServerArgs` sets draft tokens to steps + 1 whatever was asked (and warns), so with topk 1 a draft-token
  value other than steps + 1 is replaced, and the combinations it collapses are listed;
- topk > 1: the verify step takes draft tokens - 1 of the k + (steps - 1)·k² nodes of the draft tree
  (`organize_draft_results` in `speculative/eagle_utils.py`, a `torch.topk` that fails on more);
- topk > 1 with SGLANG_ENABLE_SPEC_V2 on: 0.5.7-0.5.10 refuse to start, 0.5.12 falls back to spec v1;
- topk > 1 with the trtllm_mha attention backend, or with a page size above 1 on another backend than
  flashinfer: SGLang refuses to start.

Long module: the parsing, the two engines' grids and the price are one sweep's steps, read
together by the form, each too small to stand alone.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from experiments.rules import launch_fields, secrets
from experiments.rules.launch_fields import number_bounds
from experiments.rules.launch_policy import CONTROL_CHARS, ENV_NAME

# The swept fields a rule below is about, each named alone; which fields an engine's sweep varies is its table's
# (`swept_fields`). Every engine keeps its number of drafted tokens per step in STEPS (vLLM's
# num_speculative_tokens).
STEPS = "speculative_num_steps"
TOPK = "speculative_eagle_topk"
DRAFT = "speculative_num_draft_tokens"
# The algorithms whose parameter rules are the ones above (SGLang rewrites NEXTN to EAGLE).
EAGLE_FAMILY = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE")
# vLLM's methods whose speed num_speculative_tokens sets (see the module's docstring for `suffix`).
VLLM_K_METHODS = ("eagle3", "eagle", "draft_model", "mtp", "ngram")
# SGLang's methods that draft one run of tokens whose width is the draft-token setting alone: NGRAM looks the next
# tokens up (its topk is its BFS breadth and its steps follow from the width, `_handle_ngram`), DFLASH and DSPARK
# draft a block whose size is the draft tokens (one knob sets both widths, `_handle_dflash`; steps and topk forced to
# 1). Their sweeps vary the draft-token list; the steps and topk lists are not theirs.
WIDTH_METHODS = ("NGRAM", "DFLASH", "DSPARK")
MAX_METHODS = 8

# Bounds of what one sweep may ask for. An experiment takes at most 50 candidates; a sweep spanning more than
# MAX_COMBINATIONS before the rules is a typing slip, not a plan (and its list of skipped ones would be unreadable).
MAX_VALUES = 16  # per list
MAX_VARIED = 4  # extra flags and environment variables varied, together
MAX_VALUE_LENGTH = 200
MAX_PREFIX_LENGTH = 40
MAX_COMBINATIONS = 1024

# SGLang's EnvBool reads these as true (any case).
_TRUE = {"1", "true", "yes", "on"}
_ATTENTION_BACKEND_FLAGS = ("--attention-backend", "--decode-attention-backend", "--prefill-attention-backend")
_RANGE = re.compile(r"(\d{1,4})\s*(?:-|\.\.)\s*(\d{1,4})")
_FLAG_NAME = re.compile(r"\A--[A-Za-z0-9][A-Za-z0-9-]*\Z")

# What a launch costs when the host has no history: connect, preflight, weights, CUDA graphs, verify and teardown
# of a large model on 8 GPUs take minutes (simulated hosts take seconds, and have history after one run); then
# every benchmark request decodes its output tokens, a wave of `concurrency` requests at a time, at a pessimistic
# 20 ms per token (a decode step is ~12 ms at batch 1 and grows with the batch). Prefill is left out: at the
# input lengths of a speculative benchmark it is a small share of a request.
DEFAULT_LOAD_SECONDS = 600.0
DEFAULT_TOKEN_SECONDS = 0.02


class SweepError(ValueError):
    """Input a sweep cannot be built from; `field` names the list it is about ("" for the sweep as a whole)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


Varied = tuple[tuple[str, tuple[str, ...]], ...]  # ((flag or env name, its values), ...)


@dataclass(frozen=True)
class MethodChoice:
    """A method a sweep compares, in its engine's spelling, with the draft it runs (None: the base's draft, where the
    method takes one)."""

    algorithm: str
    draft: str | None = None

    @property
    def text(self) -> str:
        return self.algorithm if self.draft is None else f"{self.algorithm}={self.draft}"


@dataclass(frozen=True)
class Sweep:
    steps: tuple[int, ...]  # vLLM: num_speculative_tokens
    topk: tuple[int, ...] = ()  # SGLang only (one value at least); vLLM has none
    draft_tokens: tuple[int, ...] = ()  # SGLang only; empty: topk 1 only, where SGLang decides them
    flags: Varied = ()
    env: Varied = ()
    name_prefix: str = ""
    # The methods compared, each with its draft (None: the base's); empty: the base's own method alone.
    methods: tuple[MethodChoice, ...] = ()

    @property
    def combinations(self) -> int:
        sizes = [len(self.steps), max(len(self.topk), 1), max(len(self.draft_tokens), 1), max(len(self.methods), 1)]
        sizes += [len(values) for _, values in (*self.flags, *self.env)]
        return math.prod(sizes)

    def values_of(self, field: str) -> tuple[int, ...]:
        """The list a swept field (`swept_fields`) takes its values from."""
        if field == STEPS:
            return self.steps
        if field == TOPK:
            return self.topk
        if field == DRAFT:
            return self.draft_tokens
        raise KeyError(field)


def swept_fields(engine: str | None = None) -> tuple[str, ...]:
    """The launch fields a sweep over a base of `engine` varies (None: any engine's, each once), in table order:
    the engine's speculative numbers kept in a column (SGLang's steps, topk and draft tokens; vLLM's
    num_speculative_tokens). A candidate copies every other field, its engine options included, from the base."""
    rows = launch_fields.all_fields() if engine is None else launch_fields.fields(engine)
    return tuple(row.name for row in rows if row.speculative and row.kind == launch_fields.INT and row.column)


def axis_names(engine: str) -> dict[str, str]:
    """What a study's page and chart call each field a sweep varies on `engine`: the key vLLM's users write in
    its speculative config (num_speculative_tokens), SGLang's short names (steps, topk, draft tokens)."""
    swept = swept_fields(engine)
    return {
        row.name: row.key if row.via == launch_fields.SPEC_JSON else row.shown_as
        for row in launch_fields.fields(engine)
        if row.name in swept
    }


def _tokens_name() -> str:
    """vLLM's name of its number of drafted tokens: "num_speculative_tokens"."""
    return axis_names(launch_fields.VLLM)[STEPS]


@dataclass(frozen=True)
class Skipped:
    """One combination the grid does not launch as given: its values (`label` names them like a candidate) and
    why; `replaced_by` names the candidate that measures what SGLang would run instead, if any."""

    label: str
    values: dict[str, Any]
    reason: str
    replaced_by: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {"label": self.label, "values": self.values, "reason": self.reason, "replaced_by": self.replaced_by}


@dataclass(frozen=True)
class Grid:
    candidates: list[dict[str, Any]]  # complete configs in the API's shape (the launch fields' names), named
    skipped: list[Skipped]
    notes: list[str]

    def refusal(self, max_candidates: int) -> str | None:
        """Why this grid cannot become an experiment's candidates, or None."""
        if not self.candidates:
            return (
                f"No valid candidate: all {len(self.skipped)} combinations are skipped (the reasons are listed). "
                "Change the value lists."
            )
        if len(self.candidates) > max_candidates:
            return (
                f"The sweep gives {len(self.candidates)} candidates, more than the {max_candidates} the experiment "
                "can take: shorten a value list."
            )
        return None


@dataclass(frozen=True)
class Estimate:
    configs: int  # the baseline and every candidate
    launches: int
    seconds_per_launch: float
    seconds: float


# ---- parsing what users type ------------------------------------------------------------------------------------


def parse_numbers(value: Any, field: str) -> tuple[int, ...]:
    """A list of whole numbers within the field's bounds: "1, 2 3" or ranges "1-4, 6..8" as typed, or a JSON list
    (of numbers or such strings). Sorted, without repeats; empty when nothing is given."""
    low, high = number_bounds()[field]
    if value is None or value == "":
        return ()
    if isinstance(value, str):
        items: list[Any] = [part for part in re.split(r"[,\s]+", value.strip()) if part]
    elif isinstance(value, list):
        items = value
    else:
        raise SweepError(field, "Give a list of whole numbers, e.g. 1, 2, 3.")
    numbers: set[int] = set()
    for item in items:
        if isinstance(item, bool) or not isinstance(item, (int, str)):
            raise SweepError(field, f"{str(item)[:20]!r} is not a whole number.")
        text = item.strip() if isinstance(item, str) else ""
        span = _RANGE.fullmatch(text)
        if span is not None:  # "2-5" or "2..5": both ends within the bounds, so the range is short
            first, last = int(span[1]), int(span[2])
            if not (low <= first <= high and low <= last <= high) or first > last:
                raise SweepError(field, f"{text[:20]!r}: a range within {low}..{high}, low to high.")
            numbers.update(range(first, last + 1))
            continue
        try:
            number = int(item)
        except ValueError:
            raise SweepError(field, f"{str(item)[:20]!r} is not a whole number.") from None
        if not low <= number <= high:
            raise SweepError(field, f"{number} is outside {low}..{high}.")
        numbers.add(number)
    if len(numbers) > MAX_VALUES:
        raise SweepError(field, f"At most {MAX_VALUES} values.")
    return tuple(sorted(numbers))


def _typed_items(value: Any, field: str, what: str) -> list[Any]:
    """A list as typed (comma- or line-separated) or as JSON; empty when nothing is given."""
    if value is None or value == "" or value == []:
        return []
    if isinstance(value, str):
        return [part.strip() for part in re.split(r"[,\n]+", value) if part.strip()]
    if isinstance(value, list):
        return value
    raise SweepError(field, f"Give a list of {what}.")


def _draft_path_refusal(path: Any) -> str | None:
    """Why a draft path typed into a sweep is not one (bounded as the config field is), else None."""
    limit = launch_fields.text_limits().get("speculative_draft_model_path", 512)
    if not isinstance(path, str) or not path.strip() or len(path) > limit or CONTROL_CHARS.search(path):
        return f"a draft path is one line of at most {limit} characters"
    if path.strip().startswith("-"):
        return f"{path.strip()[:40]!r} is a flag, not a draft path"
    return None


def parse_methods(value: Any, field: str, engine: str) -> tuple[MethodChoice, ...]:
    """The methods a sweep compares, each once, in their engine's spelling: as typed, `EAGLE3, NGRAM,
    STANDALONE=/models/qwen3-0.6b` (a method with its draft after `=`); from JSON, a list of such strings or of
    {"method", "draft"} objects. Every name is one of the engine's methods (its table's choices); a draft path is
    bounded here, and checked under the host's models root with every candidate's own fields."""
    items = _typed_items(value, field, "methods, e.g. EAGLE3, NGRAM")
    known = [c for c in launch_fields.field(engine, "speculative_algorithm").choices if c]  # type: ignore[union-attr]
    out: list[MethodChoice] = []
    for item in items:
        if isinstance(item, dict) and set(item) <= {"method", "draft"} and isinstance(item.get("method"), str):
            name, draft = item["method"].strip(), item.get("draft")
        elif isinstance(item, str):
            name, _, typed = item.partition("=")
            name, draft = name.strip(), typed.strip() or None
        else:
            raise SweepError(field, f"{str(item)[:40]!r} is not a method (a name, or NAME=draft path).")
        if name not in known:
            shown = ", ".join(known)
            raise SweepError(
                field, f"{name[:40]!r} is no method of {launch_fields.label(engine)}; its methods: {shown}."
            )
        refusal = None if draft is None else _draft_path_refusal(draft)
        if refusal is not None:
            raise SweepError(field, f"{name}: {refusal}.")
        choice = MethodChoice(name, draft)
        if any(other.algorithm == name and other.draft == draft for other in out):
            raise SweepError(field, f"{choice.text[:60]} is given twice.")
        out.append(choice)
    if len(out) > MAX_METHODS:
        raise SweepError(field, f"At most {MAX_METHODS} methods.")
    return tuple(out)


def parse_drafts(value: Any, field: str) -> tuple[str, ...]:
    """Draft checkpoints a sweep compares (their paths, each once, in order): one per line or comma-separated as typed,
    or a JSON list. Bounded here as a draft path is; each is checked under the host's models root, and as a draft of
    the target, with every candidate's own fields."""
    out: list[str] = []
    for item in _typed_items(value, field, "draft paths"):
        refusal = _draft_path_refusal(item)
        if refusal is not None:
            raise SweepError(field, f"{refusal[0].upper()}{refusal[1:]}: {str(item)[:40]!r}.")
        path = item.strip()
        if path in out:
            raise SweepError(field, f"{path[:60]} is given twice.")
        out.append(path)
    if len(out) > MAX_METHODS:
        raise SweepError(field, f"At most {MAX_METHODS} drafts.")
    return tuple(out)


def with_drafts(
    methods: Sequence[MethodChoice], drafts: Sequence[str], base_algorithm: str, engine: str
) -> tuple[MethodChoice, ...]:
    """The methods a sweep compares once its draft checkpoints are applied: each method that drafts with a model of
    its own and was given no draft runs every checkpoint in turn (the base's method when no methods are given);
    the others run as given. No drafts: the methods as they are."""
    if not drafts:
        return tuple(methods)
    choices = list(methods) or [MethodChoice(base_algorithm)]
    out: list[MethodChoice] = []
    for choice in choices:
        if choice.draft is None and choice.algorithm in launch_fields.DRAFT_METHODS[engine]:
            out += [MethodChoice(choice.algorithm, draft) for draft in drafts]
        else:
            out.append(choice)
    if len(out) > MAX_COMBINATIONS:
        raise SweepError("drafts", f"{len(out)} method and draft pairs; at most {MAX_COMBINATIONS}.")
    return tuple(dict.fromkeys(out))


def parse_varied(value: Any, field: str, kind: str) -> Varied:
    """Flags (`kind` "flag") or environment variables (`kind` "env") and the values each takes in turn.

    As typed, one per line: `--mem-fraction-static 0.8, 0.85` or `NCCL_PROTO=LL, Simple`; from JSON, an object
    of name -> list of values. Values keep their order, without repeats.
    """
    if value is None or value == "" or value == {}:
        return ()
    if isinstance(value, str):
        pairs = [_split_line(line, field, kind) for line in value.splitlines() if line.strip()]
    elif isinstance(value, dict):
        pairs = [(name, values) for name, values in value.items()]
    else:
        raise SweepError(field, f"Give an object of {_what(kind)} -> list of values.")
    if len(pairs) > MAX_VARIED:
        raise SweepError(field, f"At most {MAX_VARIED} varied {_what(kind)}s.")
    varied: list[tuple[str, tuple[str, ...]]] = []
    for name, values in pairs:
        if not isinstance(name, str) or not (_FLAG_NAME if kind == "flag" else ENV_NAME).match(name):
            example = "--mem-fraction-static" if kind == "flag" else "NCCL_PROTO"
            raise SweepError(field, f"{str(name)[:40]!r} is not a valid {_what(kind)} name (like {example}).")
        if any(name == other for other, _ in varied):
            raise SweepError(field, f"{name} is given twice.")
        if kind == "env" and secrets.is_secret_name(name):  # swept values name the candidates: every member reads them
            raise SweepError(field, f"{name} holds a secret: set it on the base config, not as a swept value.")
        varied.append((name, _values(values, name, field, kind)))
    return tuple(varied)


def _what(kind: str) -> str:
    return "flag" if kind == "flag" else "environment variable"


def _split_line(line: str, field: str, kind: str) -> tuple[str, Any]:
    text = line.strip()
    match = re.match(r"(--[^\s=]+)(?:\s*=\s*|\s+)(.*)\Z" if kind == "flag" else r"([^\s=]+)\s*=\s*(.*)\Z", text)
    if match is None:
        example = "--mem-fraction-static 0.8, 0.85" if kind == "flag" else "NCCL_PROTO=LL, Simple"
        raise SweepError(field, f"Expected a line like {example}, got {text[:60]!r}.")
    return match[1], [part.strip() for part in match[2].split(",")]


def _values(values: Any, name: str, field: str, kind: str) -> tuple[str, ...]:
    if not isinstance(values, list) or not values:
        raise SweepError(field, f"{name}: give a list of values.")
    out: list[str] = []
    for value in values:
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise SweepError(field, f"{name}: {str(value)[:20]!r} is not a value (a string or a number).")
        text = str(value).strip()
        if not text or len(text) > MAX_VALUE_LENGTH or CONTROL_CHARS.search(text):
            raise SweepError(
                field, f"{name}: values are non-empty, at most {MAX_VALUE_LENGTH} characters, one line each."
            )
        if kind == "flag" and text.startswith("--"):
            # SGLang's argparse would read it as the next flag, leaving this one without its value.
            raise SweepError(field, f"{name}: {text[:40]!r} is a flag, not a value.")
        if text not in out:
            out.append(text)
    if len(out) > MAX_VALUES:
        raise SweepError(field, f"{name}: at most {MAX_VALUES} values.")
    return tuple(out)


# ---- the grid ----------------------------------------------------------------------------------------------------


def build_grid(base: Mapping[str, Any], sweep: Sweep) -> Grid:
    """Every combination of the sweep's values applied to `base` (a config in the API's shape): the candidates
    its engine would run as asked, and the combinations skipped, each with its reason. Candidates are named after
    their values (SGLang's `s3-k1-d4`, vLLM's `num_speculative_tokens 3`, then each varied flag and environment
    variable) and are configs of the base's engine."""
    engine = base.get("engine") or launch_fields.SGLANG
    if engine not in (launch_fields.SGLANG, launch_fields.VLLM):
        raise SweepError("base", f"No sweep rules for the engine {str(engine)[:40]!r}.")
    if sweep.methods:
        return _methods_grid(base, sweep, engine)
    if engine == launch_fields.VLLM:
        return _chain_grid(base, sweep)
    algorithm = base.get("speculative_algorithm") or ""
    if algorithm not in EAGLE_FAMILY:
        raise SweepError(
            "base",
            f"The candidate a sweep varies needs a speculative algorithm of the EAGLE family "
            f"({', '.join(EAGLE_FAMILY)}), whose rules the sweep applies; it has {algorithm or 'none'}.",
        )
    if not sweep.steps or not sweep.topk:
        raise SweepError(STEPS if not sweep.steps else TOPK, "Give at least one value.")
    if sweep.combinations > MAX_COMBINATIONS:
        raise SweepError(
            "", f"The lists span {sweep.combinations} combinations; at most {MAX_COMBINATIONS}: shorten them."
        )
    candidates: dict[str, dict[str, Any]] = {}
    skipped: list[Skipped] = []
    drafts: Sequence[int | None] = sweep.draft_tokens or (None,)
    flag_choices = itertools.product(*(values for _, values in sweep.flags))
    env_choices = itertools.product(*(values for _, values in sweep.env))
    for steps, topk, draft, flag_values, env_values in itertools.product(
        sweep.steps, sweep.topk, drafts, list(flag_choices), list(env_choices)
    ):
        flags = dict(zip((name for name, _ in sweep.flags), flag_values, strict=True))
        env = dict(zip((name for name, _ in sweep.env), env_values, strict=True))
        # With topk 1 SGLang runs steps + 1 draft tokens whatever is asked (reference §1.3 step 5).
        runs = steps + 1 if topk == 1 else draft
        name = _name(sweep.name_prefix, _tree_core(steps, topk, runs), flags, env)
        candidate = _candidate(base, name, {STEPS: steps, TOPK: topk, DRAFT: runs}, flags, env)
        label = _name("", _tree_core(steps, topk, draft), flags, env)
        values = {STEPS: steps, TOPK: topk, DRAFT: draft, "extra_args": flags, "env": env}
        reason = _refusal(steps, topk, runs, candidate)
        if reason is not None:
            skipped.append(Skipped(label, values, reason))
            continue
        if draft is not None and runs != draft:
            reason = f"topk 1: SGLang runs steps + 1 = {runs} draft tokens whatever is asked"
            skipped.append(Skipped(label, values, reason, replaced_by=candidate["name"]))
        candidates.setdefault(candidate["name"], candidate)
    notes = []
    if 1 in sweep.topk:
        notes.append(
            "With topk 1 SGLang runs steps + 1 draft tokens whatever is asked: the draft-token list applies to topk "
            "above 1, and the topk-1 combinations it would change are listed as replaced and run once."
        )
    return Grid(list(candidates.values()), skipped, notes)


def _methods_grid(base: Mapping[str, Any], sweep: Sweep, engine: str) -> Grid:
    """One grid per method, merged: each method's candidates are the base with that method and its draft, over the
    lists that method takes (an EAGLE-family method the steps, topk and draft tokens with SGLang's rules; a width
    method the draft tokens alone; a vLLM method that takes num_speculative_tokens the steps list), named after the
    method first. A method with no list of its own runs once, at the engine's defaults for its settings. A method
    given no draft runs the base's where it drafts with a model of its own, and none where it does not."""
    if sweep.combinations > MAX_COMBINATIONS:
        raise SweepError(
            "", f"The lists span {sweep.combinations} combinations; at most {MAX_COMBINATIONS}: shorten them."
        )
    candidates: dict[str, dict[str, Any]] = {}
    skipped: list[Skipped] = []
    notes: list[str] = []
    for choice in sweep.methods:
        own = {**base, "speculative_algorithm": choice.algorithm}
        if choice.draft is not None:
            own["speculative_draft_model_path"] = choice.draft
        elif choice.algorithm not in launch_fields.DRAFT_METHODS[engine]:
            # It drafts from the target's own heads or from the prompt: the base's draft is not its.
            own["speculative_draft_model_path"] = None
        prefix = " ".join(filter(None, [sweep.name_prefix, choice.algorithm, _draft_tag(choice, sweep.methods)]))
        if engine == launch_fields.VLLM:
            if choice.algorithm in VLLM_K_METHODS:
                grid = _chain_grid(own, dataclasses.replace(sweep, methods=(), name_prefix=prefix))
            else:
                grid = _defaults_grid(own, sweep, prefix, engine)
        elif choice.algorithm in EAGLE_FAMILY:
            grid = build_grid(own, dataclasses.replace(sweep, methods=(), name_prefix=prefix))
        elif choice.algorithm in WIDTH_METHODS:
            grid = _width_grid(own, sweep, prefix)
        else:
            grid = _defaults_grid(own, sweep, prefix, engine)
        for candidate in grid.candidates:
            candidates.setdefault(candidate["name"], candidate)
        skipped += grid.skipped
        notes += [note for note in grid.notes if note not in notes]
    return Grid(list(candidates.values()), skipped, notes)


def _draft_tag(choice: MethodChoice, methods: Sequence[MethodChoice]) -> str:
    """What tells a method's drafts apart in its candidates' names, where the sweep runs it with more than one: the
    draft's directory name ("step2000"), or "base draft" for the base's."""
    if sum(1 for other in methods if other.algorithm == choice.algorithm) < 2:
        return ""
    return choice.draft.rstrip("/").rsplit("/", 1)[-1] if choice.draft else "base draft"


def _width_grid(base: Mapping[str, Any], sweep: Sweep, prefix: str) -> Grid:
    """An SGLang width method (WIDTH_METHODS) over the draft-token list, its steps and topk left to SGLang."""
    algorithm = base["speculative_algorithm"]
    widths: Sequence[int | None] = sweep.draft_tokens or (None,)
    candidates = []
    for width, flag_values, env_values in itertools.product(
        widths,
        list(itertools.product(*(values for _, values in sweep.flags))),
        list(itertools.product(*(values for _, values in sweep.env))),
    ):
        flags = dict(zip((name for name, _ in sweep.flags), flag_values, strict=True))
        env = dict(zip((name for name, _ in sweep.env), env_values, strict=True))
        core = "defaults" if width is None else f"d{width}"
        name = _name(prefix, core, flags, env)
        candidates.append(_candidate(base, name, {STEPS: None, TOPK: None, DRAFT: width}, flags, env))
    note = (
        f"{algorithm} drafts one run of draft-tokens width: it varies the draft-token list alone; SGLang sets its "
        "steps and topk from it."
    )
    return Grid(candidates, [], [note])


def _defaults_grid(base: Mapping[str, Any], sweep: Sweep, prefix: str, engine: str) -> Grid:
    """A method no value list applies to: one candidate per varied flag and variable, at the engine's defaults."""
    candidates = []
    for flag_values, env_values in itertools.product(
        list(itertools.product(*(values for _, values in sweep.flags))),
        list(itertools.product(*(values for _, values in sweep.env))),
    ):
        flags = dict(zip((name for name, _ in sweep.flags), flag_values, strict=True))
        env = dict(zip((name for name, _ in sweep.env), env_values, strict=True))
        cleared = {name: None for name in swept_fields(engine)}
        candidates.append(_candidate(base, _name(prefix, "defaults", flags, env), cleared, flags, env))
    note = (
        f"{base['speculative_algorithm']} takes none of the sweep's number lists here: it runs once per varied "
        f"setting, at {launch_fields.label(engine)}'s defaults for its own settings."
    )
    return Grid(candidates, [], [note])


def _chain_grid(base: Mapping[str, Any], sweep: Sweep) -> Grid:
    """A vLLM base's grid: one candidate per num_speculative_tokens and varied setting. vLLM drafts a top-1 chain
    (no tree to outgrow, no topk to refuse), so every combination runs as asked and none is skipped."""
    engine = launch_fields.label(launch_fields.VLLM)
    tokens = _tokens_name()
    algorithm = base.get("speculative_algorithm") or ""
    if algorithm not in VLLM_K_METHODS:
        raise SweepError(
            "base",
            f"The candidate a {engine} sweep varies needs a speculative method that takes {tokens} "
            f"({', '.join(VLLM_K_METHODS)}); it has {algorithm or 'none'}.",
        )
    own = swept_fields(launch_fields.VLLM)
    for field in swept_fields():
        sglang_row = launch_fields.field(launch_fields.SGLANG, field)
        if field not in own and sweep.values_of(field) and sglang_row is not None:
            raise SweepError(
                field,
                f"{engine} has no {sglang_row.label.lower()} setting: it drafts a top-1 chain of {tokens} tokens, so "
                f"a {engine} sweep varies {tokens} alone (the steps list). Leave this list empty.",
            )
    if not sweep.steps:
        raise SweepError(STEPS, "Give at least one value.")
    if sweep.combinations > MAX_COMBINATIONS:
        raise SweepError(
            "", f"The lists span {sweep.combinations} combinations; at most {MAX_COMBINATIONS}: shorten them."
        )
    candidates = []
    flag_choices = list(itertools.product(*(values for _, values in sweep.flags)))
    env_choices = list(itertools.product(*(values for _, values in sweep.env)))
    for k, flag_values, env_values in itertools.product(sweep.steps, flag_choices, env_choices):
        flags = dict(zip((name for name, _ in sweep.flags), flag_values, strict=True))
        env = dict(zip((name for name, _ in sweep.env), env_values, strict=True))
        name = _name(sweep.name_prefix, f"{tokens} {k}", flags, env)
        candidates.append(_candidate(base, name, {STEPS: k}, flags, env))
    note = (
        f"{engine} drafts a top-1 chain: {tokens} K runs what SGLang calls steps K with topk 1 and K + 1 draft tokens."
    )
    return Grid(candidates, [], [note])


def _refusal(steps: int, topk: int, draft: int | None, candidate: Mapping[str, Any]) -> str | None:
    """Why SGLang would not run this combination as asked (None: it would)."""
    if topk == 1:
        return None  # draft tokens are SGLang's own choice, steps + 1: the replacement is reported by the caller
    if draft is None:
        return f"topk {topk} needs draft tokens: add values to the draft-token list"
    nodes = topk + (steps - 1) * topk * topk
    if draft - 1 > nodes:
        return (
            f"{draft} draft tokens are more than the draft tree holds: at steps {steps} and topk {topk} it has "
            f"{nodes} nodes and SGLang verifies draft tokens - 1 of them, so at most {nodes + 1}"
        )
    env = candidate.get("env") or {}
    if str(env.get("SGLANG_ENABLE_SPEC_V2", "")).strip().lower() in _TRUE:
        return (
            f"topk {topk} with SGLANG_ENABLE_SPEC_V2 on: SGLang 0.5.7-0.5.10 refuse to start (spec v2 supports "
            "topk 1 only) and 0.5.12 falls back to spec v1, so it would not measure what it says"
        )
    args = list(candidate.get("extra_args") or [])
    backends = {_flag_value(args, flag) for flag in _ATTENTION_BACKEND_FLAGS} - {None}
    if "trtllm_mha" in backends:
        return f"topk {topk} with the trtllm_mha attention backend: SGLang supports topk 1 only there"
    page_size = _flag_value(args, "--page-size")
    if page_size is not None and page_size.isdigit() and int(page_size) > 1:
        if _flag_value(args, "--attention-backend") != "flashinfer":
            return (
                f"topk {topk} with page size {page_size}: SGLang refuses topk above 1 with pages above 1 except on "
                "the flashinfer attention backend (--attention-backend flashinfer)"
            )
    return None


def _candidate(
    base: Mapping[str, Any],
    name: str,
    values: Mapping[str, int | None],
    flags: Mapping[str, str],
    env: Mapping[str, str],
) -> dict[str, Any]:
    """`base` with the swept fields' `values`, the varied flags (each replacing the base's own) and env added."""
    args = list(base.get("extra_args") or [])
    for flag, value in flags.items():
        args = [*_without_flag(args, flag), flag, value]
    return {**base, "name": name, **values, "extra_args": args, "env": {**(base.get("env") or {}), **env}}


def _tree_core(steps: int, topk: int, draft: int | None) -> str:
    return f"s{steps}-k{topk}" if draft is None else f"s{steps}-k{topk}-d{draft}"


def _name(prefix: str, core: str, flags: Mapping[str, str], env: Mapping[str, str]) -> str:
    parts = [f"{prefix}-{core}" if prefix else core]
    parts += [f"{flag.lstrip('-')}={value}" for flag, value in flags.items()]
    parts += [f"{name}={value}" for name, value in env.items()]
    return " ".join(parts)


def _without_flag(args: list[str], flag: str) -> list[str]:
    """`args` without `flag` and its value: a varied flag replaces the base's own setting."""
    out: list[str] = []
    skip_value = False
    for arg in args:
        if skip_value:
            skip_value = False
            if not arg.startswith("--"):
                continue
        if arg == flag:
            skip_value = True
            continue
        if arg.startswith(flag + "="):
            continue
        out.append(arg)
    return out


def _flag_value(args: list[str], flag: str) -> str | None:
    """The value the last `flag` in `args` sets (`--flag value` or `--flag=value`), or None."""
    found = None
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            found = args[i + 1]
        elif arg.startswith(flag + "="):
            found = arg.split("=", 1)[1]
    return found


# ---- what it costs -----------------------------------------------------------------------------------------------


def default_launch_seconds(profile: Mapping[str, Any]) -> float:
    """A launch's duration from the profile alone (see DEFAULT_LOAD_SECONDS): for hosts without history."""
    output_len, prompts = int(profile["output_len"]), int(profile["num_prompts"])
    waves = sum(math.ceil(prompts / level) for level in profile["concurrency"]) * int(profile["passes"])
    waves += int(profile.get("warmup_requests") or 0)
    return DEFAULT_LOAD_SECONDS + waves * output_len * DEFAULT_TOKEN_SECONDS


def estimate(candidates: int, launches_per_config: int, seconds_per_launch: float) -> Estimate:
    """Launches and duration of an experiment of `candidates` candidates (the baseline runs beside them in every
    round of launches), one launch after another on the host."""
    configs = candidates + 1
    launches = configs * launches_per_config
    return Estimate(configs, launches, seconds_per_launch, launches * seconds_per_launch)


def flag_value(args: list[str], flag: str) -> str | None:
    """The value the last `flag` in `args` sets, or None (what a varied flag of a candidate is set to)."""
    return _flag_value(args, flag)
