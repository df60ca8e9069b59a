"""The typed request bodies of the JSON API: what the forms check, stated in the OpenAPI schema where a schema can
state it (types, required fields, enums, bounds, lengths, patterns, unknown keys the API refuses).

The forms stay the one validator (pages and API share them); these classes say what they take, with every bound
read from the rule or form that enforces it. A field's JSON Schema is attached with `WithJsonSchema` where Python's
type says less than the form checks, so that pydantic never refuses what the forms accepted before (the API is a
contract). Rules between fields or against stored rows are the forms' and the actions', answered with the statuses
`refusals.py` documents.

Long module: one schema per body, each a screen or less; split across modules they would import each other's
field types (a config inside an experiment, a sweep and a study) and the bounds they all read.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any

from django import forms
from ninja import Schema
from pydantic import ConfigDict, Field, WithJsonSchema, create_model

from experiments.analysis import slo
from experiments.formats import imported_results, result_archives
from experiments.formats.prompt_sampling import MAX_UPLOAD_BYTES
from experiments.rules import headroom, launch_fields, launch_policy, log_metrics, sweeps

from ..forms import ENV_NAME, MAX_CONCURRENCY, BenchmarkProfileForm, CadenceForm, PromptSetUploadForm, RerunForm
from ..forms import imports as import_forms
from ..forms.configs import MAX_EXPECT_ITEMS, MAX_EXPECT_TEXT
from ..forms.profiles import OPTIONAL_FIELDS, SLO_FIELDS
from ..forms.studies import StudyForm
from ..forms.submission import ExperimentSubmission
from ..forms.sweeps import SweepForm
from ..forms.values import MAX_CONCURRENCY_LEVELS
from ..models import BenchmarkProfile, Experiment, ServerConfig

# The characters CONTROL_CHARS refuses, as a character class of a JSON Schema (ECMA-262) pattern.
_CONTROLS = launch_policy.CONTROL_CHARS.pattern[1:-1]
_ID = {"type": "integer", "minimum": 1}


def _text(max_length: int, *, required: bool = True, argument: bool = False) -> Any:
    """A string the forms strip and check: without control characters, at most `max_length` long, not blank when
    `required`, and (for a value that becomes one argument of a launch) not starting with - or @."""
    first = rf"[^\s\-@{_CONTROLS}]" if argument else rf"[^\s{_CONTROLS}]"
    pattern = rf"^\s*{first}[^{_CONTROLS}]*$" if required else rf"^(\s*{first}[^{_CONTROLS}]*)?\s*$"
    if argument:  # a value led by blanks is stripped, so its first other character is the one that must not be -
        pattern = rf"^{first}[^{_CONTROLS}]*$" if required else rf"^({first}[^{_CONTROLS}]*)?$"
    schema = {"type": "string", "maxLength": max_length, "pattern": pattern}
    return WithJsonSchema({**schema, "minLength": 1} if required else schema)


def int_schema(low: int, high: int, *, nullable: bool = False) -> Any:
    schema: dict[str, Any] = {"type": "integer", "minimum": low, "maximum": high}
    return WithJsonSchema({"anyOf": [schema, {"type": "null"}]} if nullable else schema)


def _number(low: float, high: float, *, nullable: bool = False, exclusive_low: bool = False) -> Any:
    schema: dict[str, Any] = {"type": "number", "maximum": high}
    schema["exclusiveMinimum" if exclusive_low else "minimum"] = low
    return WithJsonSchema({"anyOf": [schema, {"type": "null"}]} if nullable else schema)


def _choice(values: Any, *, nullable: bool = False) -> Any:
    return WithJsonSchema({"enum": [*values, *([None] if nullable else [])]})


def _bounded(form: Any, field: str) -> Any:
    """The bounds of a number field of a Django form, as a JSON Schema."""
    declared = form.base_fields[field]
    bounds = (declared.min_value, declared.max_value)
    return int_schema(*bounds) if isinstance(declared, forms.IntegerField) else _number(*bounds)


def column_length(model: Any, field: str) -> int:
    return int(model._meta.get_field(field).max_length)


_BOUNDS = launch_fields.number_bounds()
ENV_NAME_PATTERN = ENV_NAME.pattern.replace(r"\A", "^").replace(r"\Z", "$")
_LINE = {"type": "string", "minLength": 1, "maxLength": MAX_EXPECT_TEXT, "pattern": f"^[^{_CONTROLS}]*$"}


class ExpectIn(Schema):
    """What the verification holds the server to; the API refuses other keys."""

    model_config = ConfigDict(extra="forbid")

    server_args: Annotated[
        dict[str, Any],
        WithJsonSchema(
            {
                "type": "object",
                "maxProperties": MAX_EXPECT_ITEMS,
                "propertyNames": {"maxLength": launch_policy.MAX_ENV_NAME_LENGTH, "pattern": f"^[^{_CONTROLS}]*$"},
                # A text value as the form holds it: no control character, at most MAX_EXPECT_TEXT characters.
                "additionalProperties": {
                    "anyOf": [
                        {"type": "string", "maxLength": MAX_EXPECT_TEXT, "pattern": f"^[^{_CONTROLS}]*$"},
                        {"type": ["number", "boolean", "null"]},
                    ]
                },
            }
        ),
    ] = {}
    log_contains: Annotated[
        list[str], WithJsonSchema({"type": "array", "maxItems": MAX_EXPECT_ITEMS, "items": _LINE})
    ] = []
    env_propagated: Annotated[
        list[str],
        WithJsonSchema(
            {
                "type": "array",
                "maxItems": MAX_EXPECT_ITEMS,
                "items": {**_LINE, "maxLength": launch_policy.MAX_ENV_NAME_LENGTH, "pattern": ENV_NAME_PATTERN},
            }
        ),
    ] = []


ENV_VALUE = {"type": "string", "maxLength": launch_policy.MAX_ENV_VALUE_LENGTH, "pattern": f"^[^{_CONTROLS}]*$"}
ENV_SCHEMA = {
    "type": "object",
    "maxProperties": launch_policy.MAX_ENV_VARS,
    "propertyNames": {"pattern": ENV_NAME_PATTERN, "maxLength": launch_policy.MAX_ENV_NAME_LENGTH},
    "additionalProperties": ENV_VALUE,
}
ARG = {**ENV_VALUE, "minLength": 1, "maxLength": launch_policy.MAX_EXTRA_ARG_LENGTH}
LOG_METRICS_SCHEMA = {
    "type": "object",
    "maxProperties": log_metrics.MAX_METRICS,
    "propertyNames": {"pattern": "^[A-Za-z_][A-Za-z0-9_]*$", "maxLength": log_metrics.MAX_NAME_LENGTH},
    "additionalProperties": {"type": "string", "format": "regex", "maxLength": log_metrics.MAX_PATTERN_LENGTH},
}


def _launch_field(row: launch_fields.LaunchField) -> tuple[Any, Any]:
    """A launch field's (type, default) in ConfigIn, from its row (`launch_fields`): the table is where fields are
    listed, so a new row is a new key of the body."""
    required = row.name == "model_path"
    if row.kind == launch_fields.TEXT:
        text = _text(row.max_length, required=required, argument=True)
        return (Annotated[str, text], ...) if required else (Annotated[str | None, text], None)
    if row.kind == launch_fields.CHOICE:
        return Annotated[str | None, _choice(launch_fields.all_choices(row.name), nullable=True)], None
    return Annotated[int | None, int_schema(*_BOUNDS[row.name], nullable=True)], None


def _engine_options_schema() -> dict[str, Any]:
    """Every engine's settings without a column, each by its row: a number within its bounds or one of its choices
    (which engine and method takes which is the rows' `engines_of` and `methods`, said in each description)."""
    properties: dict[str, Any] = {}
    for r in launch_fields.all_fields():
        if r.column:
            continue
        value: dict[str, Any] = (
            {"enum": [c for c in r.choices if c]}
            if r.kind == launch_fields.CHOICE
            else {"type": "integer", "minimum": r.bounds[0], "maximum": r.bounds[1]}
            if r.bounds
            else {}
        )
        takes = " and ".join(launch_fields.label(e) for e in launch_fields.engines_of(r.name))
        if r.methods:
            takes += f", method {' or '.join(r.methods)}"
        properties[r.name] = {"anyOf": [value, {"type": "null"}], "description": f"{r.label} ({takes})"}
    return {"type": "object", "properties": properties, "additionalProperties": False}


class _ConfigFields(Schema):
    """A server config, inline: its launch fields (one per row of `launch_fields`, any engine's: which an engine
    takes is its rows') come from the table; keys the form does not know are ignored."""

    name: Annotated[str, _text(column_length(ServerConfig, "name"))]
    engine: Annotated[str | None, _choice(launch_fields.ENGINE_NAMES, nullable=True)] = None
    engine_options: Annotated[dict[str, Any] | None, WithJsonSchema(_engine_options_schema())] = None
    env: Annotated[dict[str, Any] | None, WithJsonSchema(ENV_SCHEMA)] = None
    extra_args: Annotated[
        list[str] | None, WithJsonSchema({"type": "array", "maxItems": launch_policy.MAX_EXTRA_ARGS, "items": ARG})
    ] = None
    expect: ExpectIn | None = None
    log_metrics: Annotated[dict[str, Any] | None, WithJsonSchema(LOG_METRICS_SCHEMA)] = None
    profile_eagle3: bool = False

    def form_payload(self) -> dict[str, Any]:
        """The fields as the client gave them (what `config_form_data` reads), `expect` as its plain object."""
        return self.model_dump(exclude_unset=True)


if TYPE_CHECKING:  # the same fields, as far as a type checker can see (it cannot follow create_model)
    ConfigIn = _ConfigFields
else:
    ConfigIn = create_model(
        "ConfigIn",
        __base__=_ConfigFields,
        __doc__="A server config, inline; launch field names follow the engine's flags (SGLang's, or the vLLM "
        "setting they are; `engine_options` holds an engine's settings without a column). Keys the form does not "
        "know are ignored.",
        **{row.name: _launch_field(row) for row in launch_fields.all_fields() if row.column},
    )


class SweepBaseIn(ConfigIn):
    """The candidate a sweep varies: a config without a name of its own (each candidate is named after its values)."""

    name: Annotated[str, _text(column_length(ServerConfig, "name"), required=False)] = ""


_LEVELS = {"type": "integer", "minimum": 1, "maximum": MAX_CONCURRENCY}
_LIMITS = BenchmarkProfileForm.LIMITS


class ProfileIn(Schema):
    """How configs are measured. Left out, a field takes the browser form's default (3 passes of 1 launch at 1 and
    4 concurrent requests); `prompt_set` is a prompt set's id (null: random token ids)."""

    # Also taken as the page's text ("1, 4"), which the schema leaves out: a list is what the API documents.
    concurrency: Annotated[
        list[int] | str | None,
        WithJsonSchema({"type": "array", "minItems": 1, "maxItems": MAX_CONCURRENCY_LEVELS, "items": _LEVELS}),
    ] = None
    prompt_set: Annotated[int | None, WithJsonSchema({"anyOf": [_ID, {"type": "null"}]})] = None
    input_len: Annotated[int | None, int_schema(*_LIMITS["input_len"])] = None
    output_len: Annotated[int | None, int_schema(*_LIMITS["output_len"])] = None
    num_prompts: Annotated[int | None, int_schema(*_LIMITS["num_prompts"])] = None
    warmup_requests: Annotated[int | None, int_schema(*_LIMITS["warmup_requests"])] = None
    passes: Annotated[int | None, int_schema(*_LIMITS["passes"])] = None
    launches: Annotated[int | None, int_schema(*_LIMITS["launches"])] = None
    seed: Annotated[int | None, int_schema(*_LIMITS["seed"])] = None
    temperature: Annotated[float | None, _number(*_LIMITS["temperature"], nullable=True)] = None
    top_p: Annotated[float | None, _number(0, 1, nullable=True, exclusive_low=True)] = None
    gate_within_tokens: Annotated[int | None, int_schema(*_LIMITS["gate_within_tokens"], nullable=True)] = None
    gate_max_share: Annotated[float | None, _number(*_LIMITS["gate_max_share"], nullable=True)] = None
    request_timeout_s: Annotated[int | None, int_schema(*_LIMITS["request_timeout_s"])] = None
    readiness_timeout_s: Annotated[int | None, int_schema(*_LIMITS["readiness_timeout_s"])] = None
    stall_timeout_s: Annotated[int | None, int_schema(*_LIMITS["stall_timeout_s"])] = None
    slo_metric: Annotated[str | None, _choice(["", *slo.METRICS], nullable=True)] = None
    slo_percentile: Annotated[str | None, _choice(["", *slo.PERCENTILES], nullable=True)] = None
    slo_limit_ms: Annotated[float | None, _number(*_LIMITS["slo_limit_ms"], nullable=True)] = None

    def form_payload(self) -> dict[str, Any]:
        return self.model_dump(exclude_unset=True)


assert set(ProfileIn.model_fields) == {*BenchmarkProfileForm.Meta.fields, "concurrency"}, "a profile field unstated"
assert set(OPTIONAL_FIELDS) | set(SLO_FIELDS) <= set(ProfileIn.model_fields)


class NamedProfileIn(ProfileIn):
    name: Annotated[str, _text(column_length(BenchmarkProfile, "name"))]


HostRef = Annotated[
    str | int,
    WithJsonSchema({"anyOf": [{"type": "string", "minLength": 1, "maxLength": 100}, _ID]}),
]
Id = Annotated[int, Field(ge=1)]
ConfigRef = ConfigIn | Id
ProfileRef = ProfileIn | Id
_NUMBERS = {"type": "array", "minItems": 1, "maxItems": sweeps.MAX_VALUES}
_VARIED = {
    "type": "object",
    "maxProperties": sweeps.MAX_VARIED,
    "additionalProperties": {
        "type": "array",
        "minItems": 1,
        "maxItems": sweeps.MAX_VALUES,
        "items": {
            "anyOf": [
                {"type": "string", "maxLength": sweeps.MAX_VALUE_LENGTH, "pattern": f"^[^{_CONTROLS}]*$"},
                {"type": "number"},
            ]
        },
    },
}


def _numbers(field: str) -> Any:
    low, high = _BOUNDS[field]
    return WithJsonSchema({**_NUMBERS, "items": {"type": "integer", "minimum": low, "maximum": high}})


class _MethodIn(Schema):
    model_config = ConfigDict(extra="forbid")

    method: str
    draft: str | None = None


_METHODS = {
    "anyOf": [
        {"type": "string", "maxLength": sweeps.MAX_METHODS * 520},
        {
            "type": "array",
            "maxItems": sweeps.MAX_METHODS,
            "items": {
                "anyOf": [
                    {"type": "string", "minLength": 1, "maxLength": 520},
                    {
                        "type": "object",
                        "properties": {
                            "method": {"type": "string", "minLength": 1, "maxLength": 40},
                            "draft": {
                                "anyOf": [{"type": "string", "minLength": 1, "maxLength": 512}, {"type": "null"}]
                            },
                        },
                        "required": ["method"],
                        "additionalProperties": False,
                    },
                ]
            },
        },
        {"type": "null"},
    ]
}


_DRAFTS = {
    "anyOf": [
        {"type": "string", "maxLength": sweeps.MAX_METHODS * 520},
        {
            "type": "array",
            "maxItems": sweeps.MAX_METHODS,
            "items": {"type": "string", "minLength": 1, "maxLength": 512},
        },
        {"type": "null"},
    ]
}


class SweepIn(Schema):
    """Value lists whose grid of candidates varies `base` (a config inline or by id); the API refuses other keys.
    The base's engine decides the lists: SGLang's steps, topk (required) and draft tokens; vLLM's steps list alone,
    its num_speculative_tokens (vLLM has no topk or draft-token setting: those lists are refused)."""

    model_config = ConfigDict(extra="forbid")

    base: SweepBaseIn | Id
    # Lists are also taken as the page's text ("1, 2" or "1-4"), which the schema leaves out.
    speculative_num_steps: Annotated[list[int] | str, _numbers("speculative_num_steps")]
    speculative_eagle_topk: Annotated[list[int] | str | None, _numbers("speculative_eagle_topk")] = None
    speculative_num_draft_tokens: Annotated[list[int] | str | None, _numbers("speculative_num_draft_tokens")] = None
    extra_args: Annotated[dict[str, list[Any]] | str | None, WithJsonSchema(_VARIED)] = None
    env: Annotated[
        dict[str, list[Any]] | str | None,
        WithJsonSchema({**_VARIED, "propertyNames": {"pattern": ENV_NAME_PATTERN}}),
    ] = None
    name_prefix: Annotated[str, _text(sweeps.MAX_PREFIX_LENGTH, required=False)] = ""
    # Methods compared (each once, the base's engine's names): "EAGLE3, NGRAM" or a list of names, NAME=draft
    # strings or {"method", "draft"} objects; none: the base's own method.
    methods: Annotated[list[str | _MethodIn] | str | None, WithJsonSchema(_METHODS)] = None
    # Draft checkpoints compared (paths under the host's models root): each method that drafts with a model of its
    # own runs each in turn.
    drafts: Annotated[list[str] | str | None, WithJsonSchema(_DRAFTS)] = None

    def form_payload(self) -> dict[str, Any]:
        return {k: v for k, v in self.model_dump(exclude_unset=True).items() if k != "base"}


assert set(SweepIn.model_fields) == {"base", *SweepForm.base_fields}, "a sweep field unstated"


class ExperimentIn(Schema):
    name: Annotated[str, _text(column_length(Experiment, "name"))]
    host: HostRef  # a host's name or id
    baseline: ConfigRef
    candidates: Annotated[list[ConfigRef], Field(max_length=ExperimentSubmission.MAX_CANDIDATES)] = []
    # none: the baseline measured alone
    profile: ProfileRef
    run_candidates_without_baseline: bool = False
    # Every run records profiler traces after its measured cells (summaries in GET /api/runs/{id}).
    profile_traces: bool = False
    # Value lists whose grid of candidates joins `candidates` (see "Sweeps" below).
    sweep: SweepIn | None = None


class SweepPreviewIn(Schema):
    host: HostRef
    sweep: SweepIn
    profile: ProfileRef


class BudgetIn(Schema):
    """At least one of the two; the API refuses other keys."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"minProperties": 1})

    launches: Annotated[int | None, _bounded(StudyForm, "max_launches")] = None
    hours: Annotated[float | None, _bounded(StudyForm, "max_hours")] = None


class PrecisionIn(Schema):
    model_config = ConfigDict(extra="forbid")

    within: Annotated[float, _bounded(StudyForm, "tolerance")] = 0.02
    confidence: Annotated[float, _choice([0.95])] = 0.95


class StudyIn(Schema):
    name: Annotated[str, _text(column_length(Experiment, "name"))]
    host: HostRef
    baseline: ConfigRef
    profile: ProfileRef
    # The search space: the value lists of a sweep and the candidate they vary (`base`), as POST /api/experiments.
    sweep: SweepIn
    budget: BudgetIn  # {"launches": 40} and/or {"hours": 6}
    precision: PrecisionIn = PrecisionIn()
    round_size: Annotated[int, _bounded(StudyForm, "round_size")] = 4
    seed: Annotated[int, _bounded(StudyForm, "seed")] = 0


class ScheduleIn(Schema):
    every: Annotated[str | None, _choice(Experiment.Schedule.values, nullable=True)] = ""
    hour_utc: Annotated[int, _bounded(CadenceForm, "hour_utc")] = 2


class RerunIn(Schema):
    launches: Annotated[int, _bounded(RerunForm, "launches")] = 1


_PROMPT_NAME = 128
assert getattr(PromptSetUploadForm.base_fields["name"], "max_length", None) == _PROMPT_NAME


class PromptSetIn(Schema):
    name: Annotated[str, _text(_PROMPT_NAME)]
    # The JSONL or JSON file's text (its bytes in UTF-8 are bounded too).
    content: Annotated[str, WithJsonSchema({"type": "string", "maxLength": MAX_UPLOAD_BYTES})]


IMPORT_FORMATS = import_forms.FORMATS
MAX_IMPORT_FILES = import_forms.MAX_FILES
MAX_IMPORT_FILE_CHARS = import_forms.MAX_FILE_CHARS
MAX_IMPORT_FILE_NAME = import_forms.MAX_FILE_NAME
# What a file does not say, by the same names for every format (formats/imported_results/common.GIVEN).
_GIVEN = WithJsonSchema(
    {
        "anyOf": [
            {
                "type": "object",
                "propertyNames": {"enum": list(imported_results.GIVEN)},
                "maxProperties": len(imported_results.GIVEN),
            },
            {"type": "null"},
        ]
    }
)


class ImportFileIn(Schema):
    name: Annotated[str, _text(MAX_IMPORT_FILE_NAME)]
    format: Annotated[str | None, _choice(IMPORT_FORMATS, nullable=True)] = None
    content: Annotated[str, WithJsonSchema({"type": "string", "maxLength": MAX_IMPORT_FILE_CHARS})]
    # What the file does not say (model_path, engine, tp_size, the speculative settings, concurrency).
    given: Annotated[dict[str, Any] | None, _GIVEN] = None
    # When it was measured, where its lines do not say (the CLI sends the file's mtime); ISO 8601.
    measured_at: datetime | None = None


class ImportArchiveIn(Schema):
    """A folder of result files as one .zip or .tar(.gz), base64: each result file (.json, .jsonl) is read as a file
    of the import with the archive's format and given, placed in history at its mtime where its lines state none."""

    name: Annotated[str, _text(MAX_IMPORT_FILE_NAME)]
    content_base64: Annotated[
        str, WithJsonSchema({"type": "string", "maxLength": (result_archives.MAX_ARCHIVE_BYTES + 2) // 3 * 4})
    ]
    format: Annotated[str | None, _choice(IMPORT_FORMATS, nullable=True)] = None
    given: Annotated[dict[str, Any] | None, _GIVEN] = None


class SloIn(Schema):
    """A latency objective whole: `percentile` of `metric` at most `limit_ms` (analysis/slo.py)."""

    model_config = ConfigDict(extra="forbid")

    metric: Annotated[str, _choice(slo.METRICS)]
    percentile: Annotated[str, _choice(slo.PERCENTILES)]
    limit_ms: Annotated[float, _number(*_LIMITS["slo_limit_ms"])]


class ImportIn(Schema):
    """Into an existing `experiment` (by id), or a new one on `host` (by name): one of the two; `files`, an
    `archive` of them, or both."""

    model_config = ConfigDict(
        json_schema_extra={
            "allOf": [
                {
                    "anyOf": [
                        {"required": ["experiment"], "properties": {"experiment": {"type": "integer"}}},
                        {"required": ["host"], "properties": {"host": {"type": "string"}}},
                    ]
                },
                {
                    "anyOf": [
                        {"required": ["files"], "properties": {"files": {"minItems": 1}}},
                        {"required": ["archive"], "properties": {"archive": {"type": "object"}}},
                    ]
                },
            ]
        }
    )

    experiment: Annotated[int | None, WithJsonSchema({"anyOf": [_ID, {"type": "null"}]})] = None
    name: Annotated[str | None, _text(column_length(Experiment, "name"), required=False)] = None
    host: Annotated[str | None, WithJsonSchema({"anyOf": [{"type": "string", "minLength": 1}, {"type": "null"}]})] = (
        None
    )
    # The files, or an archive of them, or both: at least one file in all.
    files: Annotated[list[ImportFileIn], Field(max_length=MAX_IMPORT_FILES)] = []
    archive: ImportArchiveIn | None = None
    # A new experiment's SLO, its imported cells' goodput judged under it; an existing experiment keeps its own.
    slo: SloIn | None = None


class HeadroomIn(Schema):
    config: Annotated[
        int | str, WithJsonSchema({"anyOf": [_ID, {"type": "string", "minLength": 1, "maxLength": 200}]})
    ]  # a candidate of the experiment, by id or name
    # Each at most the longest accept length any config reaches (steps + 1); the config's own steps bound it too.
    accept_lengths: Annotated[
        list[Annotated[float, Field(ge=1, le=_BOUNDS["speculative_num_steps"][1] + 1)]],
        Field(max_length=headroom.MAX_LENGTHS),
    ] = []  # empty: 1.5, 2, 2.5 ... up to steps + 1


class RemedyIn(Schema):
    remedy: Annotated[str, WithJsonSchema({"type": "string", "minLength": 1, "maxLength": 200})]
