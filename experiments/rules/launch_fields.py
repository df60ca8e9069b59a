"""The launch fields of a server config, one table per engine: the only place a launch field is listed. Pure.

A row says everything specdash needs to know of one setting: where the config keeps it (a `ServerConfig` column, or a
key of its `engine_options`), how the engine takes it (a command-line flag, a key of vLLM's `--speculative-config`
JSON, or the positional model), its label, its bounds, whether only a speculative launch sends it, whether the engine
picks a value when it is unset, and how the server reports it back. The form, the API body, the config hash, the
diff, the launch argv, the verification of the effective args, the launch policy (managed flags, bounds) and the
export are derived from these rows, so adding a flag is adding a row.

Both engines keep their shared settings in the same columns: the target and draft paths, the tensor parallel size,
the method (`speculative_algorithm`, in the engine's own spelling: SGLang's `EAGLE3`, vLLM's `eagle3`) and the
number of draft steps (`speculative_num_steps`: SGLang's `--speculative-num-steps`, vLLM's `num_speculative_tokens`;
vLLM drafts a top-1 chain, so its K tokens are SGLang's K steps with topk 1 and K + 1 draft tokens), so that sweeps,
studies and comparisons read one value across engines.

Long module: the two tables and every view of them (the rows' values in a spec, their bounds and choices, the argv
words, the rules between fields, the diff rows, what an import states); the one place they are listed, by design.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

SGLANG, VLLM = "sglang", "vllm"
ENGINE_NAMES = (SGLANG, VLLM)
ENGINE_LABELS = {SGLANG: "SGLang", VLLM: "vLLM"}

# Where a field reaches the engine.
FLAG, SPEC_JSON, POSITIONAL = "flag", "speculative-config", "positional"
# What a field holds.
TEXT, INT, CHOICE = "text", "int", "choice"


@dataclass(frozen=True)
class LaunchField:
    name: str  # the ServerConfig column, or the key in ServerConfig.engine_options (column=False)
    label: str  # as the engine's users say it
    kind: str  # TEXT, INT or CHOICE
    via: str  # FLAG, SPEC_JSON or POSITIONAL
    key: str = ""  # the flag (FLAG) or the JSON key (SPEC_JSON)
    # Other spellings of the flag a server takes for the same setting: extra args may not repeat any of them.
    aliases: tuple[str, ...] = ()
    column: bool = True
    speculative: bool = False  # sent only with a speculative method; a baseline ignores it
    auto: bool = False  # unset, the engine picks a value (the diff says "auto")
    bounds: tuple[int, int] | None = None  # INT: inclusive
    max_length: int = 0  # TEXT: the longest value
    choices: tuple[str, ...] = ()  # CHOICE: the values a config may hold ("" = none)
    model_path: bool = False  # a path under the host's models root
    # The name the server reports the setting under in its effective args ("": it does not), shown beside the
    # request on the run's page; `verified`: a run whose server reports another value fails as misconfigured.
    effective: str = ""
    verified: bool = True
    diff_label: str = ""  # how the config diff names it ("": the label)
    help: str = ""
    # Imports (formats/imported_results): the `specdash import` flag that states it where a result file does not,
    # and what a refusal calls it ("": an import never states it).
    import_flag: str = ""
    import_what: str = ""
    # The letter before its value in an imported config's name ("kimi eagle3 s2 k1 d3"); "": not in names.
    name_letter: str = ""
    # The methods that take it, in the engine's spelling (empty: every method, or every launch). A method's own
    # setting is kept in `engine_options`, shown on the form only while one of its methods is chosen, and refused,
    # naming its method, for any other (`field_conflicts`).
    methods: tuple[str, ...] = ()

    @property
    def shown_as(self) -> str:
        return self.diff_label or self.label


_TARGET = LaunchField(
    "model_path", "Model path", TEXT, FLAG, "--model-path", ("--model",), max_length=512, model_path=True,
    diff_label="model", effective="model_path", verified=False,
    import_flag="--model", import_what="the served model's path",
    )  # fmt: skip
_SERVED_NAME = LaunchField(
    "served_model_name",
    "Served model name",
    TEXT,
    FLAG,
    "--served-model-name",
    max_length=255,
    diff_label="served model name",
)
_DRAFT_PATH_LABEL = "Draft model path"


def _sglang_method_row(name: str, label: str, methods: tuple[str, ...], **kwargs: Any) -> LaunchField:
    """A setting one SGLang method takes: `--` + its server arg with `_` as `-`, reported back under that name."""
    kind = CHOICE if "choices" in kwargs else INT
    flag = "--" + name.replace("_", "-")
    return LaunchField(
        name, label, kind, FLAG, flag, column=False, speculative=True, auto=True, effective=name, methods=methods,
        **kwargs,
    )  # fmt: skip


def _sglang_method_rows() -> tuple[LaunchField, ...]:
    ngram, dflash, dspark = ("NGRAM",), ("DFLASH",), ("DSPARK",)
    return (
        _sglang_method_row(
            "speculative_ngram_min_match_window_size", "N-gram min match window", ngram, bounds=(1, 1024),
            diff_label="ngram min window", help="the shortest suffix matched; SGLang's default 1 (before era C)",
        ),
        _sglang_method_row(
            "speculative_ngram_max_match_window_size", "N-gram max match window", ngram, bounds=(1, 1024),
            diff_label="ngram max window", help="the longest suffix matched; SGLang's default 12 (before era C)",
        ),
        _sglang_method_row(
            "speculative_ngram_min_bfs_breadth", "N-gram min BFS breadth", ngram, bounds=(1, 64),
            diff_label="ngram min breadth", help="SGLang's default 1",
        ),
        _sglang_method_row(
            "speculative_ngram_max_bfs_breadth", "N-gram max BFS breadth", ngram, bounds=(1, 64),
            diff_label="ngram max breadth", help="SGLang's default 10; NGRAM's topk is this",
        ),
        _sglang_method_row(
            "speculative_ngram_match_type", "N-gram match type", ngram, choices=("", "BFS", "PROB"),
            diff_label="ngram match type", help="BFS (recency, SGLang's default) or PROB (frequency)",
        ),
        _sglang_method_row(
            "speculative_ngram_branch_length", "N-gram branch length", ngram, bounds=(1, 256),
            diff_label="ngram branch length", help="SGLang's default 18 (before era C; then max trie depth)",
        ),
        _sglang_method_row(
            "speculative_ngram_max_trie_depth", "N-gram max trie depth", ngram, bounds=(1, 256),
            diff_label="ngram trie depth", help="SGLang's default 18 (era C; before it, branch length)",
        ),
        _sglang_method_row(
            "speculative_ngram_capacity", "N-gram cache capacity", ngram, bounds=(1, 1_000_000_000),
            diff_label="ngram capacity", help="SGLang's default 10000000",
        ),
        _sglang_method_row(
            "speculative_dflash_block_size", "DFLASH block size", dflash, bounds=(1, 256),
            diff_label="dflash block size", help="the verify window; unset: the draft's config, else 16",
        ),
        _sglang_method_row(
            "speculative_draft_window_size", "DFLASH draft window", dflash, bounds=(1, 10_000_000),
            diff_label="draft window", help="at least the block size",
        ),
        _sglang_method_row(
            "speculative_dspark_block_size", "DSPARK block size (gamma)", dspark, bounds=(1, 255),
            diff_label="dspark block size", help="tokens proposed; the verify window is gamma + 1",
        ),
    )  # fmt: skip


SGLANG_FIELDS: tuple[LaunchField, ...] = (
    _TARGET,
    _SERVED_NAME,
    LaunchField(
        "tp_size", "TP size", INT, FLAG, "--tp-size", ("--tp", "--tensor-parallel-size"), bounds=(1, 64),
        effective="tp_size", diff_label="tp", import_flag="--tp-size", import_what="the server's tensor-parallel size",
    ),
    LaunchField(
        "speculative_algorithm", "Speculative algorithm", CHOICE, FLAG, "--speculative-algorithm",
        choices=("", "EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK", "UNO"),
        effective="speculative_algorithm",
        diff_label="algorithm",
        import_flag="--speculative-algorithm", import_what="the speculative algorithm (NONE for none)",
    ),
    LaunchField(
        "speculative_draft_model_path", _DRAFT_PATH_LABEL, TEXT, FLAG, "--speculative-draft-model-path",
        ("--speculative-draft-model",), speculative=True, max_length=512, model_path=True, diff_label="draft model",
        effective="speculative_draft_model_path", verified=False,
        import_flag="--draft-model", import_what="the draft model's path",
    ),
    LaunchField(
        "speculative_num_steps", "Speculative steps", INT, FLAG, "--speculative-num-steps", speculative=True,
        auto=True, bounds=(1, 16), effective="speculative_num_steps", diff_label="steps",
        import_flag="--num-steps", name_letter="s", import_what="the speculative steps",
    ),
    LaunchField(
        "speculative_eagle_topk", "Topk", INT, FLAG, "--speculative-eagle-topk", speculative=True, auto=True,
        bounds=(1, 64), effective="speculative_eagle_topk", diff_label="topk",
        import_flag="--topk", name_letter="k", import_what="the draft tree's topk",
    ),
    LaunchField(
        "speculative_num_draft_tokens", "Draft tokens", INT, FLAG, "--speculative-num-draft-tokens",
        speculative=True, auto=True, bounds=(1, 256), effective="speculative_num_draft_tokens",
        diff_label="draft tokens", import_flag="--num-draft-tokens", name_letter="d",
        import_what="the draft tokens per step",
    ),
    # Each method's own settings (0.5.9 `server_args.py` and era C `arg_groups/fields`, `speculative_hook.py`: their
    # defaults in the help). The bounds are specdash's, far above any value in SGLang's docs or tests (a guess where
    # SGLang states none); each is one setting of `engine_options`.
    *_sglang_method_rows(),
)  # fmt: skip

VLLM_FIELDS: tuple[LaunchField, ...] = (
    LaunchField(
        "model_path", "Model path", TEXT, POSITIONAL, aliases=("--model",), max_length=512, model_path=True,
        diff_label="model",
    ),
    _SERVED_NAME,
    LaunchField(
        "tp_size", "Tensor parallel size", INT, FLAG, "--tensor-parallel-size", ("-tp",), bounds=(1, 64),
        effective="tensor_parallel_size", diff_label="tp",
    ),
    LaunchField(
        "speculative_algorithm", "Speculative method", CHOICE, SPEC_JSON, "method",
        choices=("", "eagle3", "eagle", "draft_model", "ngram", "mtp", "suffix", "dflash"), effective="method",
        diff_label="algorithm",
    ),
    LaunchField(
        "speculative_draft_model_path", _DRAFT_PATH_LABEL, TEXT, SPEC_JSON, "model", speculative=True,
        max_length=512, model_path=True, effective="model", verified=False, diff_label="draft model",
    ),
    LaunchField(
        "speculative_num_steps", "num_speculative_tokens", INT, SPEC_JSON, "num_speculative_tokens",
        speculative=True, bounds=(1, 16), effective="num_spec_tokens", diff_label="steps",
        help="draft tokens per step, a top-1 chain (SGLang's steps with topk 1)",
    ),
    LaunchField(
        "draft_tensor_parallel_size", "Draft tensor parallel size", INT, SPEC_JSON, "draft_tensor_parallel_size",
        column=False, speculative=True, auto=True, bounds=(1, 64), diff_label="draft tp",
        help="1 or the target's; unset: the target's",
    ),
    LaunchField(
        "draft_max_model_len", "Draft max model length", INT, SPEC_JSON, "max_model_len", column=False,
        speculative=True, auto=True, bounds=(1, 10_000_000), diff_label="draft max length",
        help="at most the draft's and the target's context",
    ),
    # Each method's own keys of `SpeculativeConfig` (vllm/config/speculative.py: `prompt_lookup_*` for ngram since
    # 0.8, `suffix_decoding_*` for suffix since 0.11); the upper bounds are specdash's guesses, the lower vLLM's.
    LaunchField(
        "prompt_lookup_min", "prompt_lookup_min", INT, SPEC_JSON, "prompt_lookup_min", column=False, speculative=True,
        auto=True, bounds=(1, 1024), diff_label="ngram min", methods=("ngram",),
        help="the shortest n-gram matched; unset: prompt_lookup_max, or 5",
    ),
    LaunchField(
        "prompt_lookup_max", "prompt_lookup_max", INT, SPEC_JSON, "prompt_lookup_max", column=False, speculative=True,
        auto=True, bounds=(1, 1024), diff_label="ngram max", methods=("ngram",),
        help="the longest n-gram matched; unset: prompt_lookup_min, or 5",
    ),
    LaunchField(
        "suffix_decoding_max_tree_depth", "suffix_decoding_max_tree_depth", INT, SPEC_JSON,
        "suffix_decoding_max_tree_depth", column=False, speculative=True, auto=True, bounds=(1, 1024),
        diff_label="suffix tree depth", methods=("suffix",), help="vLLM's default 24",
    ),
    LaunchField(
        "suffix_decoding_max_cached_requests", "suffix_decoding_max_cached_requests", INT, SPEC_JSON,
        "suffix_decoding_max_cached_requests", column=False, speculative=True, auto=True, bounds=(0, 10_000_000),
        diff_label="suffix cached requests", methods=("suffix",), help="vLLM's default 10000; 0: no global cache",
    ),
)  # fmt: skip

FIELDS: dict[str, tuple[LaunchField, ...]] = {SGLANG: SGLANG_FIELDS, VLLM: VLLM_FIELDS}

# What else of a server's effective args its run page shows beside the request: settings the engine decides on its
# own that explain its speed.
DECIDED_BY_ENGINE = {
    SGLANG: (
        "disable_overlap_schedule",
        "max_running_requests",
        "mem_fraction_static",
        "context_length",
        "cuda_graph_max_bs",
    ),
    VLLM: ("max_seq_len", "enforce_eager", "gpu_memory_utilization", "max_num_seqs", "kv_cache_dtype"),
}

# The config's settings that are not one engine setting each (extra flags, the environment, what the run checks),
# with how a diff names them. Part of every launch and of the hash, in every engine.
FREE_FIELD_LABELS = {"extra_args": "extra flags", "env": "env", "expect": "expectations", "log_metrics": "log metrics"}
FREE_FIELDS = tuple(FREE_FIELD_LABELS)

# Flags specdash sets itself on every launch of an engine (the address; the metrics the benchmark reads; vLLM's
# speculative JSON, built from the rows; SGLang's adaptive schedule, a path on the host): extra args may not repeat
# them, or the stored config would lie about what ran.
_SET_BY_SPECDASH = {
    SGLANG: ("--host", "--port", "--speculative-adaptive-config"),
    VLLM: (
        "--host",
        "--port",
        "--speculative-config",
        "-sc",
        "--spec-method",
        "--spec-model",
        "--spec-tokens",
    ),
}


def fields(engine: str) -> tuple[LaunchField, ...]:
    """The engine's rows; KeyError for an engine specdash does not drive."""
    return FIELDS[engine or SGLANG]


def field(engine: str, name: str) -> LaunchField | None:
    return next((f for f in fields(engine) if f.name == name), None)


def label(engine: str) -> str:
    return ENGINE_LABELS.get(engine or SGLANG, engine)


def column_names() -> tuple[str, ...]:
    """Every engine's column fields, in table order, each once: the config's launch columns (the hash's)."""
    names: list[str] = []
    for rows in FIELDS.values():
        names += [f.name for f in rows if f.column and f.name not in names]
    return tuple(names)


def option_names(engine: str) -> tuple[str, ...]:
    """The engine's settings kept in `engine_options`."""
    return tuple(f.name for f in fields(engine) if not f.column)


def managed_flags(engine: str) -> frozenset[str]:
    """The flags extra args may not set for `engine`: every row's flag and its aliases, and those specdash sets."""
    flags = {flag for f in fields(engine) if f.via != SPEC_JSON for flag in (f.key, *f.aliases) if flag}
    return frozenset(flags | set(_SET_BY_SPECDASH[engine or SGLANG]))


def all_managed_flags() -> frozenset[str]:
    return frozenset().union(*(managed_flags(engine) for engine in ENGINE_NAMES))


def value_of(spec: Mapping[str, Any], row: LaunchField) -> Any:
    """A row's value in a launch spec (`ServerConfig.launch_spec()`): its column, or its engine option."""
    if row.column:
        return spec.get(row.name)
    options = spec.get("engine_options") or {}
    return options.get(row.name) if isinstance(options, Mapping) else None


def is_set(value: Any) -> bool:
    return value is not None and value != ""


def refusals(engine: str, spec: Mapping[str, Any]) -> list[str]:
    """What in `spec` breaks its engine's rows: an unknown engine or option, a number out of bounds, a value outside
    the choices. (What a text may hold, and how long it may be, is the launch policy's: `text_limits`.)"""
    return [message for _, message in field_refusals(engine, spec)]


def field_refusals(engine: str, spec: Mapping[str, Any]) -> list[tuple[str, str]]:
    """`refusals`, each with the field it is about ("engine", "engine_options" or a row's name)."""
    if engine not in FIELDS:
        return [("engine", f"engine must be one of {', '.join(ENGINE_NAMES)}, not {str(engine)[:40]!r}")]
    options = spec.get("engine_options") or {}
    if not isinstance(options, Mapping):
        return [("engine_options", "engine_options must be an object")]
    problems = []
    unknown = sorted(str(k)[:40] for k in options if k not in option_names(engine))
    if unknown:
        known = ", ".join(option_names(engine)) or "none"
        problems.append(
            ("engine_options", f"{label(engine)} has no option {', '.join(unknown)} (its options: {known})")
        )
    for row in fields(engine):
        value = value_of(spec, row)
        if not is_set(value):
            continue
        if row.kind == INT and row.bounds is not None:
            low, high = row.bounds
            if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
                problems.append((row.name, f"{row.name} must be between {low} and {high}"))
        elif row.kind == CHOICE and value not in row.choices:
            allowed = ", ".join(c for c in row.choices if c)
            problems.append(
                (row.name, f"{row.name} must be one of {allowed} for {label(engine)}, not {str(value)[:40]!r}")
            )
    return problems


def speculative_config(engine: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    """vLLM's `--speculative-config` object for a speculative spec: every set SPEC_JSON row, by its key."""
    return {
        row.key: value_of(spec, row) for row in fields(engine) if row.via == SPEC_JSON and is_set(value_of(spec, row))
    }


def launch_words(engine: str, spec: Mapping[str, Any], address: tuple[str, ...] = ()) -> tuple[list[str], list[str]]:
    """(the positional words, the flags and their values) the rows put on an engine's command line, in row order,
    with the `address` words (`--host H --port P`) after the rows every launch sends, before the speculative ones.

    A baseline (no method) gets no speculative setting at all, even if some were left in the spec: a draft path
    without a method would only make the effective args disagree with the intent. Unset rows are left out, so the
    engine's own defaults (and auto-choices) apply."""
    speculative = is_set(spec.get("speculative_algorithm"))
    positional: list[str] = []
    every_launch: list[str] = []
    speculative_flags: list[str] = []
    for row in fields(engine):
        value = value_of(spec, row)
        if not is_set(value) or (row.speculative and not speculative):
            continue
        if row.via == POSITIONAL:
            positional.append(str(value))
        elif row.via == FLAG:
            # The method itself is a speculative setting too: it starts the speculative part.
            part = speculative_flags if row.speculative or row.name == "speculative_algorithm" else every_launch
            part += [row.key, str(value)]
    if speculative and any(row.via == SPEC_JSON for row in fields(engine)):
        speculative_flags += [
            "--speculative-config",
            json.dumps(speculative_config(engine, spec), separators=(",", ":")),
        ]
    return positional, [*every_launch, *address, *speculative_flags]


def effective_mismatches(engine: str, requested: Mapping[str, Any], effective: Mapping[str, Any]) -> list[str]:
    """The verified rows the server reports otherwise than requested (`effective`: the engine's effective args under
    the rows' `effective` names). Unset rows and rows the server does not report are not judged."""
    problems = []
    for row in fields(engine):
        want = value_of(requested, row)
        if not row.effective or not row.verified or not is_set(want) or row.effective not in effective:
            continue
        have = effective[row.effective]
        if have != want:
            problems.append(f"requested {row.name}={want!r}, the server runs {row.effective}={have!r}")
    return problems


def diff_rows() -> tuple[tuple[str, str], ...]:
    """(field, label) of every field a config diff compares, each once, in table order, then the free fields."""
    seen: dict[str, str] = {}
    for rows in FIELDS.values():
        for row in rows:
            seen.setdefault(row.name, row.shown_as)
    return (("engine", "engine"), *seen.items(), *FREE_FIELD_LABELS.items())


def auto_fields(engine: str) -> frozenset[str]:
    return frozenset(row.name for row in fields(engine) if row.auto)


def text_limits() -> dict[str, int]:
    """The longest value of every text field, any engine's (each becomes one argument of a launch)."""
    limits: dict[str, int] = {}
    for rows in FIELDS.values():
        for row in rows:
            if row.kind == TEXT:
                limits[row.name] = max(limits.get(row.name, 0), row.max_length)
    return limits


def number_bounds() -> dict[str, tuple[int, int]]:
    """The inclusive bounds of every number field, any engine's (an engine's own rows may be narrower)."""
    bounds: dict[str, tuple[int, int]] = {}
    for rows in FIELDS.values():
        for row in rows:
            if row.kind == INT and row.bounds is not None:
                low, high = bounds.get(row.name, row.bounds)
                bounds[row.name] = (min(low, row.bounds[0]), max(high, row.bounds[1]))
    return bounds


def all_choices(name: str) -> tuple[str, ...]:
    """Every engine's values of a choice field, each once (which engine takes which is its rows')."""
    values: list[str] = []
    for rows in FIELDS.values():
        for row in rows:
            if row.name == name:
                values += [c for c in row.choices if c not in values]
    return tuple(values)


def all_fields() -> tuple[LaunchField, ...]:
    """One row per field name, any engine's, in table order (the first engine's row where both have one): what a
    form or a schema that takes every engine's config shows."""
    seen: dict[str, LaunchField] = {}
    for rows in FIELDS.values():
        for row in rows:
            seen.setdefault(row.name, row)
    return tuple(seen.values())


def engines_of(name: str) -> tuple[str, ...]:
    """The engines that have a field called `name`."""
    return tuple(engine for engine, rows in FIELDS.items() if any(row.name == name for row in rows))


# The methods that draft with a model of their own, which the config must name (the others draft from the target's
# own heads or from the prompt; SGLang's DSPARK may find its draft bundled in the target's checkpoint).
DRAFT_METHODS = {
    SGLANG: ("EAGLE", "EAGLE3", "STANDALONE", "DFLASH"),
    VLLM: ("eagle3", "eagle", "draft_model", "dflash"),
}
# The methods whose draft is the target's own MTP layers unless a draft path names a head exported apart.
MTP_METHODS = {SGLANG: ("NEXTN",), VLLM: ("mtp",)}
# SGLang's methods that draft a tree of steps x topk as EAGLE does (`_handle_eagle_family`).
SGLANG_EAGLE_FAMILY = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE")
# vLLM's methods with no default number of tokens (it reads n_predict from the draft's config.json, which EAGLE-3
# drafts do not have).
_VLLM_TOKENS_REQUIRED = ("eagle3", "eagle", "draft_model")

# The first version of each engine that knows a method (sglang-interface.md §1.2: 0.5.2 adds STANDALONE, 0.5.3
# NGRAM; era C's builtins add DFLASH, DSPARK and UNO, placed here at 0.5.14, the era's first version: a guess, the
# reference does not say which era-C version added them. vllm-interface.md §1.3: eagle3 from 0.8.5). A method not
# named is known to every version specdash drives.
METHODS_SINCE: dict[str, dict[str, tuple[int, ...]]] = {
    SGLANG: {
        "STANDALONE": (0, 5, 2),
        "NGRAM": (0, 5, 3),
        "DFLASH": (0, 5, 14),
        "DSPARK": (0, 5, 14),
        "UNO": (0, 5, 14),
    },
    VLLM: {"eagle3": (0, 8, 5)},
}


def version_numbers(version: str | None) -> tuple[int, ...] | None:
    """ "0.5.3.post3" -> (0, 5, 3); None for a version that does not start with numbers."""
    numbers = []
    for part in str(version or "").strip().lstrip("v").split(".")[:3]:
        digits = part[: len(part) - len(part.lstrip("0123456789"))]
        if not digits:
            break
        numbers.append(int(digits[:6]))
        if digits != part:
            break
    return tuple(numbers) if numbers else None


def methods_of(engine: str, version: str | None = None) -> tuple[str, ...]:
    """The methods `engine` knows (every one its row lists when the version is None or unreadable)."""
    row = field(engine, "speculative_algorithm")
    methods = tuple(c for c in row.choices if c) if row is not None else ()
    have = version_numbers(version)
    if have is None:
        return methods
    since = METHODS_SINCE.get(engine or SGLANG, {})
    return tuple(m for m in methods if have >= since.get(m, ()))


def method_version_refusal(engine: str, method: str, version: str | None) -> str | None:
    """Why `engine` at `version` cannot run `method` (it came later), or None (known, or the version unknown)."""
    if not method or version_numbers(version) is None or method in methods_of(engine, version):
        return None
    since = METHODS_SINCE.get(engine or SGLANG, {}).get(method)
    if since is None:
        return None
    first = ".".join(str(n) for n in since)
    return f"{label(engine)} {version} does not know the method {method}: it came with {label(engine)} {first}."


def method_fields(engine: str, method: str) -> tuple[LaunchField, ...]:
    """The settings only `method` (and maybe others) takes, in table order: what the form shows for it."""
    return tuple(row for row in fields(engine) if method and method in row.methods)


def unlisted_flags(engine: str, spec: Mapping[str, Any], known: frozenset[str]) -> list[tuple[str, str]]:
    """(field, flag) of each set method setting whose flag the host's server does not list in its --help (SGLang
    renames them between versions: NGRAM's branch length became its max trie depth)."""
    return [
        (row.name, row.key)
        for row in fields(engine)
        if row.methods and row.via == FLAG and is_set(value_of(spec, row)) and row.key not in known
    ]


def field_conflicts(engine: str, spec: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(field, message) for each rule between a config's fields that its engine enforces: a method the engine does
    not know, a field of another engine, a speculative setting without a method, a method's setting given for
    another method, a draft method without a draft, and each engine's own per method (SGLang's steps, topk and draft
    tokens together and topk 1's draft tokens for the EAGLE family, NGRAM's windows and breadths, DFLASH's and
    DSPARK's block sizes; vLLM's draft tensor parallel size of 1 or the target's, ngram's lookup lengths). Where
    the engine refuses or overrides with a message of its own, the message quotes it. Bounds and lengths are
    `refusals`'."""
    engine = engine or SGLANG
    name = label(engine)
    found: list[tuple[str, str]] = []
    own = {row.name for row in fields(engine)}
    for row in all_fields():
        if row.name not in own and is_set(value_of(spec, row)):
            found.append((row.name, f"{name} has no {row.label.lower()} setting: leave it empty for {name}."))
    algorithm = spec.get("speculative_algorithm") or ""
    method_row = field(engine, "speculative_algorithm")
    if method_row is not None and algorithm and algorithm not in method_row.choices:
        known = ", ".join(c for c in method_row.choices if c)
        return [*found, ("speculative_algorithm", f"{name} knows no method {algorithm!r}; its methods: {known}.")]
    for row in fields(engine):
        if row.methods and algorithm not in row.methods and is_set(value_of(spec, row)):
            owners = " or ".join(row.methods)
            chosen = f"method {algorithm}" if algorithm else "no method (a baseline)"
            found.append(
                (row.name, f"{row.label} is a setting of {owners}: this config runs {chosen}; leave it empty.")
            )
    if not algorithm:
        found += [
            (row.name, "Only a speculative config (a method set) takes this.")
            for row in fields(engine)
            if row.speculative and not row.methods and is_set(value_of(spec, row))
        ]
        return found
    if algorithm in DRAFT_METHODS[engine] and not is_set(spec.get("speculative_draft_model_path")):
        # DFLASH's own words (era C speculative_hook.py: _handle_dflash); the others' are specdash's.
        words = "DFLASH speculative decoding requires setting --speculative-draft-model-path."
        message = f"SGLang refuses it: {words!r}" if algorithm == "DFLASH" else f"{algorithm} needs a draft model path."
        found.append(("speculative_draft_model_path", message))
    if engine == SGLANG:
        found += _sglang_conflicts(spec, algorithm)
    else:
        found += _vllm_conflicts(spec, algorithm)
    return found


def _int_setting(spec: Mapping[str, Any], engine: str, name: str) -> int | None:
    """A number field's value in `spec`, or None where it is unset or not a number (its bounds refuse that)."""
    row = field(engine, name)
    value = value_of(spec, row) if row is not None else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _sglang_conflicts(spec: Mapping[str, Any], algorithm: str) -> list[tuple[str, str]]:
    if algorithm == "NGRAM":
        return _ngram_conflicts(spec)
    if algorithm in ("DFLASH", "DSPARK"):
        return _block_conflicts(spec, algorithm)
    if algorithm not in SGLANG_EAGLE_FAMILY:
        return []  # UNO: no rule known beyond the table's
    trio = ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")
    given = [name for name in trio if spec.get(name) is not None]
    if given and len(given) != len(trio):
        # SGLang asserts this too: it only auto-chooses all three together.
        message = "Set steps, topk and draft tokens together, or leave all three empty."
        return [(name, message) for name in trio if name not in given]
    steps, topk, draft = (spec.get(name) for name in trio)
    if topk == 1 and steps and draft and draft != steps + 1:
        return [
            (
                "speculative_num_draft_tokens",
                f"With topk 1 SGLang forces draft tokens to steps + 1 = {steps + 1}; "
                f"set {steps + 1} so the stored config says what runs.",
            )
        ]
    return []


def _ngram_conflicts(spec: Mapping[str, Any]) -> list[tuple[str, str]]:
    found = []
    if spec.get("speculative_eagle_topk") is not None:
        # _handle_ngram: `server_args.speculative_eagle_topk = server_args.speculative_ngram_max_bfs_breadth`,
        # unconditionally and without a word in the log.
        found.append(
            (
                "speculative_eagle_topk",
                "SGLang sets NGRAM's topk to its max BFS breadth (speculative_eagle_topk = "
                "speculative_ngram_max_bfs_breadth) and ignores a topk given: set the N-gram max BFS breadth instead.",
            )
        )
    pairs = (
        ("speculative_ngram_min_match_window_size", "speculative_ngram_max_match_window_size", "match window"),
        ("speculative_ngram_min_bfs_breadth", "speculative_ngram_max_bfs_breadth", "BFS breadth"),
    )
    for low_name, high_name, what in pairs:
        low, high = _int_setting(spec, SGLANG, low_name), _int_setting(spec, SGLANG, high_name)
        if low is not None and high is not None and low > high:
            # SGLang says nothing of this; its n-gram cache would match no window (specdash's rule).
            found.append((low_name, f"The min {what} ({low}) is above the max {what} ({high}): set min <= max."))
    depth = ("speculative_ngram_branch_length", "speculative_ngram_max_trie_depth")
    if all(_int_setting(spec, SGLANG, name) is not None for name in depth):
        found.append(
            (
                "speculative_ngram_max_trie_depth",
                "The branch length and the max trie depth are one setting under two SGLang versions' names: set "
                "the one the host's SGLang knows (branch length before era C, max trie depth from it).",
            )
        )
    return found


def _block_conflicts(spec: Mapping[str, Any], algorithm: str) -> list[tuple[str, str]]:
    """DFLASH's and DSPARK's rules (era C `speculative_hook.py`: _handle_dflash, _handle_dspark), each in SGLang's
    words: one step of topk 1, and a verify window the block size fixes."""
    found = []
    who = "DFLASH" if algorithm == "DFLASH" else "DSpark"
    for name in ("speculative_num_steps", "speculative_eagle_topk"):
        value = spec.get(name)
        if value is not None and value != 1:
            words = f"{who} only supports {name} == 1; overriding {name}={value} to 1."
            found.append((name, f"SGLang overrides it: {words!r} Leave it empty or 1 so the config says what runs."))
    draft = spec.get("speculative_num_draft_tokens")
    if algorithm == "DFLASH":
        block = _int_setting(spec, SGLANG, "speculative_dflash_block_size")
        if block is not None and draft is not None and draft != block:
            words = (
                "Both --speculative-num-draft-tokens and --speculative-dflash-block-size are set but they differ. "
                f"For DFLASH they must match. speculative_num_draft_tokens={draft}, "
                f"speculative_dflash_block_size={block}."
            )
            found.append(("speculative_num_draft_tokens", f"SGLang refuses it: {words!r}"))
        window = _int_setting(spec, SGLANG, "speculative_draft_window_size")
        width = block if block is not None else draft
        if window is not None and isinstance(width, int) and window < width:
            words = (
                "--speculative-draft-window-size must be >= --speculative-num-draft-tokens (block_size). "
                f"window_size={window}, block_size={width}."
            )
            found.append(("speculative_draft_window_size", f"SGLang refuses it: {words!r}"))
        return found
    gamma = _int_setting(spec, SGLANG, "speculative_dspark_block_size")
    if gamma is not None and draft is not None and draft != gamma + 1:
        words = (
            f"DSpark speculative_num_draft_tokens must equal gamma + 1 (= {gamma + 1} for gamma={gamma}), but got "
            f"speculative_num_draft_tokens={draft}."
        )
        found.append(("speculative_num_draft_tokens", f"SGLang refuses it: {words!r}"))
    elif isinstance(draft, int) and draft < 2:
        words = f"DSpark speculative_num_draft_tokens must be >= 2 (= gamma + 1), got {draft}."
        found.append(("speculative_num_draft_tokens", f"SGLang refuses it: {words!r}"))
    return found


def _vllm_conflicts(spec: Mapping[str, Any], algorithm: str) -> list[tuple[str, str]]:
    found = []
    if algorithm in _VLLM_TOKENS_REQUIRED and spec.get("speculative_num_steps") is None:
        # vLLM reads it from the draft's config.json only where that has n_predict, which EAGLE-3 drafts do not.
        found.append(("speculative_num_steps", f"{algorithm} needs num_speculative_tokens (vLLM has no default)."))
    options = spec.get("engine_options") or {}
    draft_tp, tp = options.get("draft_tensor_parallel_size"), spec.get("tp_size") or 1
    if draft_tp is not None and draft_tp not in (1, tp):
        found.append(
            (
                "draft_tensor_parallel_size",
                f"vLLM refuses speculative_draft_tensor_parallel_size={draft_tp}: it cannot be other value than 1 or "
                f"target model tensor_parallel_size ({tp}).",
            )
        )
    low, high = _int_setting(spec, VLLM, "prompt_lookup_min"), _int_setting(spec, VLLM, "prompt_lookup_max")
    if low is not None and high is not None and low > high:
        # vllm/config/speculative.py, SpeculativeConfig.__post_init__ (ngram).
        words = f"prompt_lookup_min={low} must be <= prompt_lookup_max={high}"
        found.append(("prompt_lookup_min", f"vLLM refuses it: {words!r}."))
    return found


def speculative_settings(engine: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    """The method and every speculative setting a spec sets, by field name ({} for a baseline): what an export or a
    summary says of a config's speculation."""
    if not is_set(spec.get("speculative_algorithm")):
        return {}
    return {
        row.name: value
        for row in fields(engine)
        if (row.speculative or row.name == "speculative_algorithm") and is_set(value := value_of(spec, row))
    }


# The same method in each engine's spelling (SGLang's -> vLLM's): what an import of one engine's file files under the
# other's names, and back.
METHOD_EQUIVALENTS = {
    "EAGLE": "eagle",
    "EAGLE3": "eagle3",
    "NEXTN": "mtp",
    "NGRAM": "ngram",
    "STANDALONE": "draft_model",
    "DFLASH": "dflash",
}


def sglang_spec_as(engine: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    """A config's fields named as SGLang's (what every result-file reader gives) as `engine` takes them: its method
    in that engine's spelling, the fields it has not left out. SGLang's topk 1 with steps + 1 draft tokens is the
    chain vLLM drafts, so nothing is lost; another tree stays in the fields and the engine's rules refuse it."""
    if engine == SGLANG:
        return dict(spec)
    out = dict(spec)
    method = out.get("speculative_algorithm")
    if method:
        out["speculative_algorithm"] = METHOD_EQUIVALENTS.get(str(method).upper(), method)
    own = {row.name for row in fields(engine)}
    steps, topk, draft = (
        out.get(f) for f in ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")
    )
    if topk in (None, 1) and (draft is None or (steps is not None and draft == steps + 1)):
        out = {name: value for name, value in out.items() if name in own or name not in {r.name for r in all_fields()}}
    return {**out, "engine": engine}
