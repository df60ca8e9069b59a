"""Configs side by side, field by field, each cell marked where it differs from the first (the baseline or the
reference pick): the comparison page, the compare page and a config's own page show these rows."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from experiments.rules import launch_fields, secrets

# The config fields compared side by side, with their labels (every engine's launch fields, from their table); the
# name is the column header.
CONFIG_FIELDS = (*launch_fields.diff_rows(), ("content_hash", "hash"))


@dataclass(frozen=True)
class DiffCell:
    text: str
    changed: bool  # differs from the baseline's value


@dataclass(frozen=True)
class ConfigDiffRow:
    field: str
    label: str
    cells: list[DiffCell]

    @property
    def differs(self) -> bool:
        return any(cell.changed for cell in self.cells)


def config_diff_rows(configs: Sequence[Any]) -> list[ConfigDiffRow]:
    """A row per compared field; a cell is `changed` when its text differs from the baseline's (the first)."""
    rows = []
    for name, label in CONFIG_FIELDS:
        texts = [_config_text(config, name) for config in configs]
        cells = [DiffCell(text, i > 0 and text != texts[0]) for i, text in enumerate(texts)]
        rows.append(ConfigDiffRow(name, label, cells))
    return rows


def _config_text(config: Any, name: str) -> str:
    if name == "content_hash":
        return config.short_hash
    if name == "engine":
        return launch_fields.label(config.engine)
    engine = getattr(config, "engine", "") or launch_fields.SGLANG
    row = launch_fields.field(engine, name)
    if name not in launch_fields.FREE_FIELD_LABELS and row is None:
        return "—"  # a setting its engine has not
    value = launch_fields.value_of(config.launch_spec(), row) if row is not None else getattr(config, name)
    if value is None and row is not None and row.auto and config.is_speculative:
        return "auto"
    if value in (None, "", [], {}):
        return "—"
    if name == "extra_args":
        return " ".join(str(arg) for arg in value)
    if name == "env":  # shown to every reader of a page: secret-looking values masked
        return " ".join(f"{key}={val}" for key, val in sorted(secrets.shown(value).items()))
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True)
    return str(value)
