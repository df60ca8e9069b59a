"""The form of what is launched (a server config); how it is measured (a benchmark profile) is in profiles.py.

Long module: one form whose fields come from every engine's launch-field rows, with the clean step of each (paths,
flags against the host's listing, environment, expectations, log metrics, masked secrets) and the rules between
them; split, each part would need the form's state (the host, the engine, the source config) passed around.
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

from django import forms
from django.conf import settings
from django.core.exceptions import ValidationError
from django.utils.timesince import timesince

from experiments.analysis.explanations import MODEL_METRICS
from experiments.rules import launch_fields, launch_policy, log_metrics, secrets, server_flags

from ..models import Host, ServerConfig
from .values import (
    CONFLICT,
    CONTROL_CHARS,
    ENV_NAME,
    BoundedJSONField,
    check_env,
    check_extra_args,
    format_env,
    no_control_chars,
    parse_env,
    parse_extra_args,
)

# What `expect` may hold: enough for any verification a person writes by hand, bounded for the database and the
# run page.
MAX_EXPECT_ITEMS = 64
MAX_EXPECT_TEXT = 1000


# What the boxes look like filled in, shown while they are empty.
EXPECT_EXAMPLE = '{"env_propagated": ["NCCL_PROTO"]}'
LOG_METRICS_EXAMPLE = '{"verify_ms": "Target verify: (?P<verify_ms>[\\\\d.]+) ms"}'


# What "Profile EAGLE-3" adds to a config: the environment variable that makes the server print its draft and verify
# times, and the log metrics that read them (the explanatory model's, `explanations.MODEL_METRICS`).
EAGLE3_PROFILE_ENV = {"EAGLE3_PROFILE": "1"}


def config_form_data(payload: dict[str, Any]) -> dict[str, Any]:
    """JSON config (API shape, the launch fields' names) -> the data the config form takes."""
    data = {
        k: v for k, v in payload.items() if k not in {"env", "extra_args", "expect", "log_metrics", "engine_options"}
    }
    for row in launch_fields.all_fields():
        if row.kind != launch_fields.INT and data.get(row.name) is None:
            data[row.name] = ""
    if data.get("tp_size") is None:
        data["tp_size"] = 1  # every engine's default, as for any flag the JSON leaves out
    if not data.get("engine"):
        data["engine"] = launch_fields.SGLANG
    options = payload.get("engine_options")
    if isinstance(options, dict):
        data.update({f"option_{name}": value for name, value in options.items()})
        data["engine_options"] = options  # kept to refuse an option no engine has
    # Not turned into text: a newline in an env value would read as a second variable, and a string of
    # extra args would be split into characters. The form checks them as given.
    data["env"] = payload.get("env") or {}
    data["extra_args"] = payload.get("extra_args") or []
    data["expect"] = json.dumps(payload.get("expect") or {})
    data["log_metrics"] = json.dumps(payload.get("log_metrics") or {})
    return data


def suggested_model_paths(models_root: str) -> tuple[str, str]:
    """The target and draft model paths a new config's form starts with on a host of `models_root`
    (SPECDASH_SUGGESTED_MODELS); "" for either without a root or a name."""
    target, draft = (*settings.SPECDASH_SUGGESTED_MODELS, "", "")[:2]
    return (
        f"{models_root}/{target}" if models_root and target else "",
        f"{models_root}/{draft}" if models_root and draft else "",
    )


def split_eagle3_profile(env: dict[str, str], metrics: dict[str, str]) -> tuple[bool, dict[str, str], dict[str, str]]:
    """Whether a stored config has everything "Profile EAGLE-3" sets, and its env and log metrics without that (what
    the boxes show beside the ticked checkbox, so nothing is there twice)."""
    env, metrics = dict(env or {}), dict(metrics or {})
    profiled = all(env.get(k) == v for k, v in EAGLE3_PROFILE_ENV.items()) and all(
        metrics.get(k) == v for k, v in MODEL_METRICS.items()
    )
    if profiled:
        env = {k: v for k, v in env.items() if k not in EAGLE3_PROFILE_ENV}
        metrics = {k: v for k, v in metrics.items() if k not in MODEL_METRICS}
    return profiled, env, metrics


class OptionalJSONField(BoundedJSONField):
    """A JSON object box that starts empty: Django renders an absent value as the text `null`, which a user then has
    to delete (or submits, and reads back as an error-free but puzzling literal)."""

    def prepare_value(self, value: Any) -> Any:
        if value is None or value == {}:
            return ""
        return super().prepare_value(value)


def _algorithm_choices() -> list[Any]:
    """The methods of every engine, grouped by engine (each engine's spelling): a baseline is "" in all."""
    groups: list[Any] = [("", "none (baseline)")]
    for engine in launch_fields.ENGINE_NAMES:
        row = launch_fields.field(engine, "speculative_algorithm")
        if row is not None:
            groups.append((launch_fields.label(engine), [(c, c) for c in row.choices if c]))
    return groups


def _describe(row: launch_fields.LaunchField) -> tuple[str, str]:
    """A launch field's label and help: its own, and where the engines differ, which engine calls it what (or which
    engines take it at all)."""
    engines = launch_fields.engines_of(row.name)
    notes = []
    for engine in engines:
        other = launch_fields.field(engine, row.name)
        if other is not None and other.label != row.label:
            notes.append(f"{launch_fields.label(engine)}: {other.label}")
    if len(engines) < len(launch_fields.ENGINE_NAMES):
        notes.append(f"{' and '.join(launch_fields.label(e) for e in engines)} only")
    if row.help:
        notes.append(row.help)
    return row.label, "; ".join(notes)


def _option_field(row: launch_fields.LaunchField) -> forms.Field:
    """The form field of a setting kept in `engine_options`: a number within the row's bounds, or one of its
    choices."""
    if row.kind == launch_fields.CHOICE:
        return forms.ChoiceField(required=False, choices=[(c, c or "engine's default") for c in row.choices])
    low, high = row.bounds or (None, None)
    return forms.IntegerField(required=False, min_value=low, max_value=high)


class ServerConfigForm(forms.ModelForm):
    engine = forms.ChoiceField(
        choices=[(e, launch_fields.label(e)) for e in launch_fields.ENGINE_NAMES],
        required=False,
        help_text="the inference server that runs it; left out: SGLang",
    )
    speculative_algorithm = forms.ChoiceField(choices=_algorithm_choices, required=False, label="Speculative method")
    env_text = forms.CharField(
        label="Environment",
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="NAME=VALUE per line",
    )
    extra_args_text = forms.CharField(label="Extra flags", required=False, help_text="e.g. --mem-fraction-static 0.85")
    expect = OptionalJSONField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2, "placeholder": EXPECT_EXAMPLE}),
        help_text="JSON: server_args, log_contains, env_propagated",
    )
    log_metrics = OptionalJSONField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2, "placeholder": LOG_METRICS_EXAMPLE}),
        help_text="JSON: metric name -> regex with a group of that name",
    )
    profile_eagle3 = forms.BooleanField(
        required=False,
        label="Profile EAGLE-3 (draft/verify timings for the break-even model)",
        help_text=f"sets {', '.join(f'{k}={v}' for k, v in EAGLE3_PROFILE_ENV.items())} and the log metrics "
        f"{' and '.join(MODEL_METRICS)}",
    )

    # The stored config this block was loaded from ("Load a saved config…", "Duplicate & edit"). A stale or forged
    # id is ignored rather than refused: it only decides the new row's history link, never what is launched.
    source_config = forms.CharField(required=False, widget=forms.HiddenInput)

    # Environment prefixes the host allows beyond the built-in ones (`Host.extra_env_prefixes`); the submission
    # sets them once it knows the host, before the form is validated.
    extra_env_prefixes: tuple[str, ...] = ()
    # The same for the SGLang flags the host allows beyond a member's list (`Host.extra_flags`).
    extra_flags: tuple[str, ...] = ()
    # The host whose SGLang --help listing (Host.known_server_flags) the flags are checked against: a flag its
    # version does not know is refused here, at submission, not by the server after the baseline has run.
    listed_on: Host | None = None

    class Meta:
        model = ServerConfig
        # The launch fields are the table's (launch_fields): every engine's columns; an engine's other settings are
        # the option_<name> fields added in __init__.
        fields = ["name", "engine", *(row.name for row in launch_fields.all_fields() if row.column)]
        # Suggestions from the host's models root, filled in by the page (experiment_new.js).
        widgets = {
            "model_path": forms.TextInput(attrs={"list": "host-models"}),
            "speculative_draft_model_path": forms.TextInput(attrs={"list": "host-models"}),
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for row in launch_fields.all_fields():
            if not row.column:
                self.fields[f"option_{row.name}"] = _option_field(row)
            field = self.fields[row.name if row.column else f"option_{row.name}"]
            field.label, field.help_text = _describe(row)
            # Which engines take the field, and which of their methods: the page shows it for those alone
            # (experiment_new.js).
            field.widget.attrs["data-engines"] = " ".join(launch_fields.engines_of(row.name))
            if row.methods:
                field.widget.attrs["data-methods"] = " ".join(row.methods)
        self.fields["speculative_algorithm"].label = "Speculative method"
        if self.instance.pk:
            for name, value in (self.instance.engine_options or {}).items():
                if f"option_{name}" in self.fields:
                    self.fields[f"option_{name}"].initial = value
            profiled, env, metrics = split_eagle3_profile(self.instance.env, self.instance.log_metrics)
            self.fields["env_text"].initial = format_env(env)
            self.fields["extra_args_text"].initial = shlex.join(self.instance.extra_args)
            self.fields["log_metrics"].initial = metrics
            self.fields["profile_eagle3"].initial = profiled

    def launch_rows(self) -> list[forms.BoundField]:
        """The bound fields of every engine's launch settings but the model paths and the served name (placed apart
        on the page), in table order."""
        return [self[name] for name in self._row_names(speculative=True)]

    def baseline_rows(self) -> list[forms.BoundField]:
        """`launch_rows` of a baseline: no method, no speculative setting."""
        return [self[name] for name in self._row_names(speculative=False)]

    @staticmethod
    def _row_names(*, speculative: bool) -> list[str]:
        return [
            row.name if row.column else f"option_{row.name}"
            for row in launch_fields.all_fields()
            if not row.model_path
            and row.name != "served_model_name"
            and (speculative or not (row.speculative or row.name == "speculative_algorithm"))
        ]

    def _clean_text(self, field: str, label: str) -> str:
        value = self.cleaned_data[field].strip()
        refusal = launch_policy.text_refusal(label, value, launch_fields.text_limits()[field])
        if refusal:
            raise ValidationError(f"{refusal}.")
        return value

    def clean_source_config(self) -> ServerConfig | None:
        value = str(self.cleaned_data.get("source_config") or "").strip()
        # ASCII digits within the id column's range (str.isdigit also takes "²", and a huge number fails the query).
        if not re.fullmatch(r"[0-9]{1,18}", value):
            return None
        return ServerConfig.objects.filter(pk=int(value)).first()

    def clean_engine(self) -> str:
        return self.cleaned_data.get("engine") or launch_fields.SGLANG

    def clean_name(self) -> str:
        value = self.cleaned_data["name"].strip()
        no_control_chars(value, "The name")
        return value

    def clean_model_path(self) -> str:
        return self._clean_text("model_path", "The model path")

    def clean_speculative_draft_model_path(self) -> str:
        return self._clean_text("speculative_draft_model_path", "The draft model path")

    def clean_served_model_name(self) -> str:
        return self._clean_text("served_model_name", "The served model name")

    def clean_tp_size(self) -> int:
        value = self.cleaned_data["tp_size"]
        low, high = launch_fields.number_bounds()["tp_size"]
        if not low <= value <= high:
            raise ValidationError(f"TP size must be between {low} and {high}.")
        return value

    # The JSON API hands env and extra_args over as given (see config_form_data); the browser sends text.
    def clean_env_text(self) -> dict[str, str]:
        if self.add_prefix("env") in self.data:
            return check_env(self.data[self.add_prefix("env")], self.extra_env_prefixes)
        return parse_env(self.cleaned_data.get("env_text") or "", self.extra_env_prefixes)

    def launches_on(self, host: Host | None) -> None:
        """The host's admin-set allowances and its SGLang's flag listing apply to this config."""
        self.extra_env_prefixes = tuple(host.extra_env_prefixes or ()) if host else ()
        self.extra_flags = tuple(host.extra_flags or ()) if host else ()
        self.listed_on = host

    def clean_extra_args_text(self) -> list[str]:
        engine = self.cleaned_data.get("engine") or launch_fields.SGLANG
        if self.add_prefix("extra_args") in self.data:
            args = check_extra_args(self.data[self.add_prefix("extra_args")], self.extra_flags, engine)
        else:
            args = parse_extra_args(self.cleaned_data.get("extra_args_text") or "", self.extra_flags, engine)
        # The host's listing is of its SGLang's --help: a vLLM config's flags are held to vLLM's allowlist alone.
        listed = self.listed_on is not None and engine == launch_fields.SGLANG
        known = self.listed_on.known_server_flags() if listed and self.listed_on is not None else None
        unknown = server_flags.unknown_flags(args, known) if known is not None else []
        if unknown and self.listed_on is not None:
            read_at = self.listed_on.server_flags_at
            when = f"{timesince(read_at)} ago" if read_at else "before"
            raise ValidationError(
                server_flags.refusal(unknown, self.listed_on.name, self.listed_on.listed_sglang_version, when),
                code=CONFLICT,
            )
        return args

    def clean_expect(self) -> dict[str, Any]:
        value = self.cleaned_data.get("expect") or {}
        if not isinstance(value, dict):
            raise ValidationError("Expectations must be a JSON object.")
        unknown = set(value) - {"server_args", "log_contains", "env_propagated"}
        if unknown:
            raise ValidationError(f"Unknown expectation keys: {', '.join(sorted(unknown))}.")
        server_args = value.get("server_args", {})
        if not isinstance(server_args, dict):
            raise ValidationError("expect.server_args must be an object of server arg -> value.")
        if len(server_args) > MAX_EXPECT_ITEMS:
            raise ValidationError(f"expect.server_args holds at most {MAX_EXPECT_ITEMS} args.")
        for arg, want in server_args.items():
            # A text by its characters (as the API's schema states it), anything else by its JSON.
            size = len(want) if isinstance(want, str) else len(json.dumps(want))
            if len(arg) > launch_policy.MAX_ENV_NAME_LENGTH or size > MAX_EXPECT_TEXT:
                raise ValidationError(f"expect.server_args: {arg[:40]!r} or its value is too long.")
        for key in ("log_contains", "env_propagated"):
            items = value.get(key, [])
            if not isinstance(items, list) or not all(isinstance(i, str) and i for i in items):
                raise ValidationError(f"expect.{key} must be a list of non-empty strings.")
            if len(items) > MAX_EXPECT_ITEMS or any(len(i) > MAX_EXPECT_TEXT for i in items):
                raise ValidationError(
                    f"expect.{key} holds at most {MAX_EXPECT_ITEMS} strings of at most {MAX_EXPECT_TEXT} characters."
                )
        for name in value.get("env_propagated", []):
            if not ENV_NAME.match(name):
                raise ValidationError(f"{name!r} is not a valid environment variable name.")
        if any(CONTROL_CHARS.search(text) for text in _strings_in(value)):
            raise ValidationError("Expectations must not contain control characters or newlines.")
        return value

    def clean_log_metrics(self) -> dict[str, str]:
        value = self.cleaned_data.get("log_metrics") or {}
        if isinstance(value, dict) and any("\x00" in text for text in _strings_in(value)):
            raise ValidationError("Log metrics must not contain NUL characters.")
        problems = log_metrics.pattern_refusals(value)
        if problems:
            # A pattern without its metric's group is a rule between a key and its value; the rest a schema states.
            unnamed = {log_metrics.needs_group(name) for name in value} if isinstance(value, dict) else set()
            raise ValidationError([ValidationError(p, code=CONFLICT if p in unnamed else "invalid") for p in problems])
        return value

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        self._restore_masked_secrets(data)
        engine = data.get("engine") or launch_fields.SGLANG
        options = {
            row.name: data.get(f"option_{row.name}")
            for row in launch_fields.all_fields()
            if not row.column and launch_fields.is_set(data.get(f"option_{row.name}"))
        }
        unknown = [str(k)[:40] for k in (self.data.get("engine_options") or {}) if f"option_{k}" not in self.fields]
        if unknown:
            self.add_error("engine", f"No engine has the option {', '.join(sorted(unknown))}.")
        data["engine_options"] = options
        spec = {**data, "engine_options": options}
        for field, message in launch_fields.field_conflicts(engine, spec):
            self._conflict(field if field in self.fields else f"option_{field}", message)
        self._check_host_knows(engine, spec)
        if data.get("profile_eagle3"):
            if data.get("speculative_algorithm"):
                self._add_eagle3_profile(data)
            else:
                self._conflict("profile_eagle3", "Only a speculative config (a method set) takes this.")
        # A row's own bounds and choices; an option another engine has is a conflict said above, one no engine has
        # the schema's (the engine's name is a choice of its field).
        for field, problem in launch_fields.field_refusals(engine, spec):
            name = field if field in self.fields else f"option_{field}"
            if name in self.fields and name not in self.errors:
                self.add_error(name, f"Must be {problem.partition(' must be ')[2] or problem}.")
        return data

    def _check_host_knows(self, engine: str, spec: dict[str, Any]) -> None:
        """The method and its settings against what the host's SGLang is known to take (its version and its --help
        listing, `Host.server_flags`): a method its version lacks, or a setting's flag its listing does not name, is
        refused now rather than by the server after the baseline ran. Says nothing where nothing is known."""
        host = self.listed_on
        if host is None or engine != launch_fields.SGLANG:
            return  # only SGLang's listing is read from a host (a vLLM config is held to its rows alone)
        version = host.listed_sglang_version
        refusal = launch_fields.method_version_refusal(engine, spec.get("speculative_algorithm") or "", version)
        if refusal:
            self._conflict("speculative_algorithm", f"{refusal} (as {host.name}'s SGLang was last read)")
        known = host.known_server_flags()
        if known is None or not spec.get("speculative_algorithm"):
            return
        for name, flag in launch_fields.unlisted_flags(engine, spec, known):
            what = f"SGLang {version}" if version else "The SGLang"
            self._conflict(f"option_{name}", f"{what} on {host.name} does not know {flag} (its launch_server --help).")

    def _conflict(self, field: str, message: str) -> None:
        """A field refused for what another field holds (a rule no schema states)."""
        self.add_error(field, ValidationError(message, code=CONFLICT))

    def _restore_masked_secrets(self, data: dict[str, Any]) -> None:
        """A block loaded from a stored config shows its secret-looking values as SECRET_MASK; submitted so, each
        takes the stored config's value back (the same name only). Without a source that has one, the mask is not
        a value: the user is asked for the real one rather than launching "(hidden)"."""
        env = data.get("env_text")
        if not isinstance(env, dict):
            return
        source = data.get("source_config")
        data["env_text"], missing = secrets.with_stored_secrets(env, source.env if source is not None else {})
        for name in missing:
            self._conflict(
                "env_text",
                f"{name} shows {secrets.MASK}: type its value (secrets are never shown, and this "
                "config was not loaded from one that has it).",
            )

    def _add_eagle3_profile(self, data: dict[str, Any]) -> None:
        """Put what "Profile EAGLE-3" sets into the cleaned env and log metrics; refuse a different value typed
        into the boxes for the same name (which one would hold is anybody's guess)."""
        env, metrics = data.get("env_text"), data.get("log_metrics")
        if not isinstance(env, dict) or not isinstance(metrics, dict):
            return  # their own errors are shown
        box = "“Profile EAGLE-3”"
        clashes = [k for k, v in EAGLE3_PROFILE_ENV.items() if env.get(k, v) != v]
        if clashes:
            self._conflict("env_text", f"{', '.join(clashes)} is set by {box}: leave it out or untick the box.")
        clashes = [k for k, v in MODEL_METRICS.items() if metrics.get(k, v) != v]
        if clashes:
            self._conflict("log_metrics", f"{', '.join(clashes)} is set by {box}: leave it out or untick the box.")
        if "env_text" in data and "log_metrics" in data:
            data["env_text"] = {**env, **EAGLE3_PROFILE_ENV}
            data["log_metrics"] = {**metrics, **MODEL_METRICS}

    def built_config(self) -> ServerConfig:
        """The validated config as a new unsaved instance, without looking for a stored one (no query)."""
        config = self.save(commit=False)
        config.engine_options = self.cleaned_data["engine_options"]
        config.env = self.cleaned_data["env_text"]
        config.extra_args = self.cleaned_data["extra_args_text"]
        config.expect = self.cleaned_data["expect"]
        config.log_metrics = self.cleaned_data["log_metrics"]
        return config

    def save_unsaved(self) -> ServerConfig:
        """The validated config as an unsaved instance (the action saves it with everything else); or, for a config
        submitted with the name and launch of a stored one, that stored row (the block's source first): stored
        configs are immutable, so a second row would only split the history and list one config twice (the demo's
        baseline, submitted by its seeded history and by its experiment, did). Changed from a loaded block, the new
        version links to its source."""
        config = self.built_config()
        source = self.cleaned_data.get("source_config")
        same = list(ServerConfig.objects.with_hash(config.compute_hash()).filter(name=config.name)[:20])
        if same:
            return next((c for c in same if source is not None and c.pk == source.pk), same[0])
        config.derived_from = source
        return config


def _strings_in(value: Any) -> list[str]:
    """Every string in a JSON value, keys included (the database refuses some characters anywhere in jsonb)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [text for key, item in value.items() for text in (*_strings_in(key), *_strings_in(item))]
    if isinstance(value, list):
        return [text for item in value for text in _strings_in(item)]
    return []
