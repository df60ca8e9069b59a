"""Stored configs and profiles found again: the search behind the config pages and the new-experiment page's "Load a
saved config…" pickers, a config's history (its other versions and the runs that used it), and what a stored config
or profile puts into the new-experiment form's boxes.

Configs are content-hashed and never edited once used: "editing" one makes a new row, linked to the one it came
from by `derived_from`. The history follows those links both ways and adds the configs of the same name.
"""

from __future__ import annotations

import re
import shlex
from collections import defaultdict
from dataclasses import dataclass, field
from functools import reduce
from operator import or_
from typing import Any

from django.db.models import Avg, Count, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Coalesce

from experiments.analysis.config_diff import CONFIG_FIELDS
from experiments.forms.configs import ServerConfigForm, split_eagle3_profile
from experiments.forms.profiles import BenchmarkProfileForm
from experiments.forms.submission import profile_form_data
from experiments.forms.values import format_env
from experiments.models import BenchmarkProfile, Experiment, Measurement, Run, ServerConfig, ServerConfigQuerySet
from experiments.rules import config_names, launch_fields, secrets

# A search box's text is a name, a path or a hash prefix: anything longer is a paste gone wrong.
MAX_QUERY = 200
# The pickers list this many matches; typing more narrows them down.
SEARCH_LIMIT = 20
# Below this, a hex word ("b", "cafe") would match a hash by chance more often than a name on purpose.
MIN_HASH_PREFIX = 6
_HEX = re.compile(r"[0-9a-f]+")
# "eagle3-2step v3": the name a new version gets, counting on from the highest taken.
NAME_MAX = ServerConfig._meta.get_field("name").max_length or 128
# How far the history follows `derived_from` links (a chain of remedies is a handful; this bounds the queries).
MAX_LINK_DEPTH = 20
MAX_VERSIONS = 200
RUNS_SHOWN = 100
_LABELS = dict(CONFIG_FIELDS)


def search_configs(query: str) -> ServerConfigQuerySet:
    """The configs whose name or model path holds `query`, or whose hash starts with it; newest first."""
    configs = ServerConfig.objects.order_by("-created_at", "-id")
    text = query.strip()[:MAX_QUERY]
    if not text:
        return configs
    match = Q(name__icontains=text) | Q(model_path__icontains=text) | Q(speculative_draft_model_path__icontains=text)
    if len(text) >= MIN_HASH_PREFIX and _HEX.fullmatch(text.lower()):
        match |= Q(content_hash__startswith=text.lower())
    return configs.filter(match)


def with_run_count(configs: ServerConfigQuerySet) -> ServerConfigQuerySet:
    """`run_count` on each config, counted per row read (a correlated count, served by the run's config index), so a
    page of configs counts its own runs, never a GROUP BY over every run of every config."""
    runs = Run.objects.filter(config=OuterRef("pk")).order_by().values("config").annotate(n=Count("*")).values("n")
    return configs.annotate(run_count=Coalesce(Subquery(runs), 0))


def search_profiles(query: str) -> QuerySet[BenchmarkProfile]:
    profiles = BenchmarkProfile.objects.order_by("-created_at", "-id")
    text = query.strip()[:MAX_QUERY]
    return profiles.filter(name__icontains=text) if text else profiles


def config_initial(config: ServerConfig) -> dict[str, Any]:
    """A stored config as the initial values of a config block, remembering where they came from (`source_config`:
    submitted unchanged, the stored row is reused; changed, the new one links to it)."""
    # What "Profile EAGLE-3" sets shows as its ticked box, not a second time in the env and log metrics boxes.
    profiled, env, metrics = split_eagle3_profile(config.env, config.log_metrics)
    # Secret-looking values stay masked in the boxes (every member opens this page); submitted still masked, the
    # form takes them back from `source_config` (ServerConfigForm.clean).
    return {
        **config.launch_spec(),
        "env": secrets.shown(config.env or {}),
        "name": config.name,
        "env_text": format_env(secrets.shown(env)),
        "extra_args_text": shlex.join(config.extra_args),
        "profile_eagle3": profiled,
        "expect": config.expect,
        "log_metrics": metrics,
        "source_config": config.pk,
        # The engine's settings without a column, in their own boxes (ServerConfigForm's option_<name>).
        **{f"option_{name}": value for name, value in (config.engine_options or {}).items()},
    }


def config_box_values(config: ServerConfig) -> dict[str, Any]:
    """`config_initial` as the page's boxes show it: JSON boxes as text (empty when empty), no None, and the env and
    extra args only as their boxes' text (`env_text`, `extra_args_text`)."""
    fields = ServerConfigForm.base_fields
    values = {}
    for name, value in config_initial(config).items():
        if name in ("env", "extra_args", "engine_options"):
            continue
        if name in ("expect", "log_metrics"):
            value = fields[name].prepare_value(value)
        values[name] = "" if value is None else value
    # Each engine option's box (the form's option_<name>), empty where the config has none: a picked config leaves
    # nothing of the block's former settings (a method's own ones included).
    options = config.engine_options or {}
    for row in launch_fields.all_fields():
        if not row.column:
            value = options.get(row.name)
            values[f"option_{row.name}"] = "" if value is None else value
    return values


def profile_initial(profile: BenchmarkProfile) -> dict[str, Any]:
    return profile_form_data({f: getattr(profile, f) for f in (*BenchmarkProfileForm.Meta.fields, "concurrency")})


def version_names(names: set[str]) -> dict[str, str]:
    """For each name, the name its next version gets (`rules.config_names`, against every stored name): one query."""
    bases = {config_names.version_base(name) for name in names}
    taken: set[str] = set()
    if bases:
        similar = reduce(or_, (Q(name__startswith=base) for base in bases))
        taken = set(ServerConfig.objects.filter(similar).values_list("name", flat=True))
    return {name: config_names.next_version_name(name, taken | {name}, NAME_MAX) for name in names}


def block_sources(blocks: dict[str, ServerConfig]) -> dict[str, dict[str, Any]]:
    """Per block prefix of the new-experiment page, the stored config it starts from (as the pickers' answers
    describe one), so the page can rename a changed block to a new version as it does for a picked config."""
    versions = version_names({c.name for c in blocks.values()})
    return {
        prefix: {"id": c.pk, "name": c.name, "short_hash": c.short_hash, "version_name": versions[c.name]}
        for prefix, c in blocks.items()
    }


def latest_experiment_using(config: ServerConfig) -> Experiment | None:
    """The newest experiment that has `config` as its baseline or one of its candidates."""
    using = Q(baseline=config) | Q(candidate__config=config)
    return (
        Experiment.objects.filter(using)
        .select_related("host", "baseline", "profile")
        .order_by("-created_at", "-id")
        .distinct()
        .first()
    )


# ---- a config's history ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConfigVersion:
    config: ServerConfig
    relation: str  # how it relates to the config whose page this is
    differs: list[str]  # the launch fields (their labels) whose values differ from that config's


@dataclass(frozen=True)
class ConfigRun:
    run: Run
    is_baseline: bool
    # Mean output tok/s per concurrency over the run's passes, lowest concurrency first.
    throughput: list[tuple[int, float]] = field(default_factory=list)


def config_versions(config: ServerConfig) -> list[ConfigVersion]:
    """Every other version of `config`, oldest first: those linked to it by `derived_from` (up to the first of the
    chain, and everything made from any of them), the configs of the same name, and the same launch under another
    name."""
    parents = _ancestors(config)
    root = parents[-1] if parents else config
    tree = _descendants(root)
    found: dict[int, ServerConfig] = {c.pk: c for c in [*parents, *tree.values()]}
    related = _annotated().filter(Q(name=config.name) | Q(content_hash=config.content_hash) | Q(pk__in=found))
    rows = []
    ancestor_ids = {c.pk for c in parents}
    for other in related.exclude(pk=config.pk):
        if other.pk in ancestor_ids:
            relation = "earlier version" if other.pk != config.derived_from_id else "made from"
        elif _descends_from(other.pk, config.pk, tree):
            relation = "made from this"
        elif other.pk in found:
            relation = f"another version of {root.name}"
        elif other.name == config.name:
            relation = "same name"
        else:
            relation = "same launch, another name"
        rows.append(ConfigVersion(other, relation, _differing_fields(config, other)))
    return rows


def _annotated() -> ServerConfigQuerySet:
    return with_run_count(ServerConfig.objects.select_related("created_by", "derived_from")).order_by(
        "created_at", "id"
    )


def _ancestors(config: ServerConfig) -> list[ServerConfig]:
    """`config`'s derived_from chain, nearest first (one query per link, bounded)."""
    chain: list[ServerConfig] = []
    seen = {config.pk}
    parent_id = config.derived_from_id
    while parent_id is not None and parent_id not in seen and len(chain) < MAX_LINK_DEPTH:
        parent = ServerConfig.objects.filter(pk=parent_id).first()
        if parent is None:
            break
        chain.append(parent)
        seen.add(parent.pk)
        parent_id = parent.derived_from_id
    return chain


def _descendants(root: ServerConfig) -> dict[int, ServerConfig]:
    """Everything made from `root`, at any depth: one query per generation, bounded."""
    found: dict[int, ServerConfig] = {}
    frontier = [root.pk]
    for _ in range(MAX_LINK_DEPTH):
        children = list(ServerConfig.objects.filter(derived_from__in=frontier).exclude(pk__in=[root.pk, *found]))
        if not children or len(found) >= MAX_VERSIONS:
            break
        found.update((c.pk, c) for c in children)
        frontier = [c.pk for c in children]
    return found


def _descends_from(pk: int, ancestor: int, tree: dict[int, ServerConfig]) -> bool:
    seen = set()
    node: int | None = pk
    while node in tree and node not in seen:
        seen.add(node)
        node = tree[node].derived_from_id
        if node == ancestor:
            return True
    return False


def _differing_fields(config: ServerConfig, other: ServerConfig) -> list[str]:
    mine, theirs = config.launch_spec(), other.launch_spec()
    names = [*ServerConfig.LAUNCH_FIELDS, "engine", "engine_options"]
    return [_LABELS.get(name, name.replace("_", " ")) for name in names if mine[name] != theirs[name]]


def config_runs(config: ServerConfig, limit: int = RUNS_SHOWN) -> list[ConfigRun]:
    """The newest runs of `config`, each with its experiment and its mean output throughput per concurrency."""
    runs = list(
        Run.objects.filter(config=config).select_related("experiment", "host").order_by("-created_at", "-id")[:limit]
    )
    cells = (
        Measurement.objects.filter(run__in=[r.pk for r in runs])
        .values("run_id", "concurrency")
        .annotate(tok_s=Avg("output_throughput"))
        .order_by("run_id", "concurrency")
    )
    throughput: dict[int, list[tuple[int, float]]] = defaultdict(list)
    for cell in cells:
        throughput[cell["run_id"]].append((cell["concurrency"], cell["tok_s"]))
    return [ConfigRun(r, r.experiment.baseline_id == config.pk, throughput[r.pk]) for r in runs]
