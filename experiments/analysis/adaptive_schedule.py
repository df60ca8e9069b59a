"""An SGLang adaptive-speculation config (`--speculative-adaptive-config`, reference d3) from a study's per-band
winners, and what it cannot express. Pure.

Each band becomes one batch-size slot keyed by the band's lowest concurrency, with its winner's steps as the only
candidate (0 for a band whose answer is no speculation), so SGLang's EMA rule has nothing to move between and the
slot serves exactly the static winner the study measured. A running batch maps to the slot with the largest key not
above it, after padding up to the next captured CUDA-graph size: a batch just below a band's low bound may pad into
that band, which the verification experiment measures rather than this module guesses.

One server runs one algorithm, one draft model and topk 1 under adaptive speculation, so a band whose winner needs
anything else is said, never silently changed: a topk > 1 winner is written as its steps at topk 1 (the nearest
schedule SGLang can run), a winner with another algorithm or draft keeps the band at the server's own steps nearest
to it, and a winner with other flags or variables (NCCL_PROTO=LL) gets its steps under the server's settings.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

ADAPTIVE_ALGORITHMS = ("EAGLE", "EAGLE3")


@dataclass(frozen=True)
class BandWinner:
    """One band of a study's answer: its concurrencies and the winning config's speculative fields."""

    low: int
    high: int
    config: str  # the winner's name, for the notes
    algorithm: str | None = None  # None: no speculation (the baseline won)
    num_steps: int | None = None
    topk: int | None = None
    draft_model_path: str | None = None
    # The winner's other launch settings (extra flags, NAME=VALUE variables): one server has one launch.
    settings: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return f"c = {self.low}" if self.low == self.high else f"{self.low} <= c <= {self.high}"

    @property
    def speculates(self) -> bool:
        return self.algorithm is not None and bool(self.num_steps)


@dataclass(frozen=True)
class AdaptiveSchedule:
    """The config to write (None when no band speculates), the server fields it goes with, and per band what the
    config could not express."""

    config: dict[str, dict[str, Any]] | None
    algorithm: str | None = None
    draft_model_path: str | None = None
    initial_steps: int | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def is_exact(self) -> bool:
        """Every band serves its own winner."""
        return self.config is not None and not self.notes

    def to_json(self) -> str:
        """The file's text: stable key order, so two schedules diff line by line."""
        if self.config is None:
            raise ValueError("no band speculates: there is no adaptive config to write")
        ordered = dict(sorted(self.config.items(), key=lambda item: int(item[0])))
        return json.dumps(ordered, indent=2) + "\n"


def build_adaptive_schedule(bands: Sequence[BandWinner]) -> AdaptiveSchedule:
    bands = sorted(bands, key=lambda band: band.low)
    speculating = [band for band in bands if band.speculates]
    if not speculating:
        return AdaptiveSchedule(None, notes=["No band speculates: serve the baseline; there is nothing to adapt."])
    server = next((band for band in speculating if band.algorithm in ADAPTIVE_ALGORITHMS), None)
    if server is None:
        names = ", ".join(sorted({str(band.algorithm) for band in speculating}))
        return AdaptiveSchedule(
            None,
            notes=[f"SGLang adapts the steps of EAGLE and EAGLE3 only; the winners here use {names}."],
        )
    notes: list[str] = []
    config: dict[str, dict[str, Any]] = {}
    for band in bands:
        steps = 0
        if band.speculates:
            steps = int(band.num_steps or 0)
            if band.algorithm != server.algorithm or band.draft_model_path != server.draft_model_path:
                steps = _nearest(steps, [int(b.num_steps or 0) for b in speculating if _same_server(b, server)])
                notes.append(
                    f"{band.label}: {band.config} runs {band.algorithm} with draft {band.draft_model_path}; one "
                    f"server runs {server.algorithm} with draft {server.draft_model_path}, so this band gets "
                    f"{steps} steps of it."
                )
            elif (band.topk or 1) > 1:
                notes.append(
                    f"{band.label}: {band.config} uses topk {band.topk}; SGLang's adaptive speculation runs topk 1 "
                    f"only, so this band gets {steps} steps at topk 1, which the study did not measure."
                )
            if band.settings != server.settings:
                notes.append(
                    f"{band.label}: {band.config} launches with {_settings(band)}; one server launches with "
                    f"{_settings(server)}, so this band runs its steps with the server's."
                )
        config[str(band.low)] = {"candidate_steps": [steps]}
    initial = int(server.num_steps or 0)
    return AdaptiveSchedule(config, server.algorithm, server.draft_model_path, initial, notes)


def _settings(band: BandWinner) -> str:
    return " ".join(band.settings) or "no extra settings"


def _same_server(band: BandWinner, server: BandWinner) -> bool:
    return band.algorithm == server.algorithm and band.draft_model_path == server.draft_model_path


def _nearest(steps: int, choices: Sequence[int]) -> int:
    return min(choices, key=lambda choice: (abs(choice - steps), choice))
