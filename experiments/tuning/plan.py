"""What an auto-tuning study launches next, when it stops, and what it recommends (pure: the study's rows in,
decisions out; the real study and `bench/autotune.py` run this same code).

A study runs in rounds. Each round launches the baseline and up to `round_size` candidates, interleaved, and one
launch measures every concurrency of the study. Before a round, per concurrency:
1. the racing rule (`analysis.racing`) over everything measured so far names the leader, the configs clearly worse
   (never launched again) and the contenders (their interval still reaches above the leader by more than the
   precision wanted): the leader, while its own interval is too wide, and the contenders get the first slots;
2. the remaining slots go to configs never measured, asked from Optuna's TPE sampler (ask-and-tell), one sampler
   per concurrency since the best config differs with the load; its objective is the config's speedup there.
Exploration at a concurrency ends when the last `patience` configs it brought were neither the leader nor a
contender there, or when the space is exhausted. The study stops when every concurrency is settled and explored
("precision"), or when the next round would pass the budget ("budget").

The Optuna studies live in memory and are rebuilt from the study's rows before every round (`add_trial` of each
config's current mean speedup, refused and failed configs as 0): the database rows stay the only truth, a worker
that dies between rounds loses nothing, and a config's value follows its latest launches. Each rebuild seeds its
sampler from the study's seed, the round and the concurrency, so a study is reproducible.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..analysis import racing
from .space import SearchSpace

BASELINE = "baseline"  # the config key of the study's baseline in its measurements
PRECISION, BUDGET, CANCELLED = "precision", "budget", "cancelled"
_ASKS_PER_SLOT = 12  # Optuna proposals tried per free slot before a seeded pick among the unmeasured


@dataclass(frozen=True)
class Settings:
    concurrency: tuple[int, ...]
    tolerance: float = 0.02  # "within 2% of the best"
    max_launches: int = 100
    round_size: int = 5
    seed: int = 0
    patience: int = 10
    startup_trials: int = 6
    prior_sigma: float = racing.DEFAULT_PRIOR_SIGMA


@dataclass
class History:
    """Everything measured: config -> concurrency -> tok/s per launch (the baseline under BASELINE), in the order
    configs were first measured; configs whose launch failed (out of memory, crashed) and launches spent."""

    samples: dict[str, dict[int, list[float]]] = field(default_factory=dict)
    failed: set[str] = field(default_factory=set)
    # Configs whose outputs parted from the baseline's in some round (the equivalence gate): measured, so never
    # proposed again, but never in a race either: a speed bought by wrong outputs is no candidate's.
    outputs_differ: set[str] = field(default_factory=set)
    # Configs whose runs measure a degenerate benchmark (analysis/degenerate.py: config_reasons, the rule the
    # experiment's comparison applies), with why: measured, never proposed again, never in a race.
    degenerate: dict[str, str] = field(default_factory=dict)
    launches: int = 0

    def add(self, name: str, tok_s: Mapping[int, float]) -> None:
        cells = self.samples.setdefault(name, {})
        for level, value in tok_s.items():
            cells.setdefault(level, []).append(value)

    def at(self, level: int) -> dict[str, list[float]]:
        """What races at `level`: every measured config but those whose outputs differ or whose runs are
        degenerate."""
        return {
            name: cells[level]
            for name, cells in self.samples.items()
            if cells.get(level) and name not in self.outputs_differ and name not in self.degenerate
        }


@dataclass(frozen=True)
class Plan:
    candidates: list[str]  # configs to launch beside the baseline, in launch order
    stop: str | None = None


def races(history: History, settings: Settings) -> dict[int, racing.Race]:
    return {
        level: racing.race(history.at(level), tolerance=settings.tolerance, prior_sigma=settings.prior_sigma)
        for level in settings.concurrency
    }


def plan_round(space: SearchSpace, history: History, settings: Settings, round_index: int) -> Plan:
    """The candidates of the next round, or why the study stops."""
    room = settings.max_launches - history.launches - 1  # the baseline launches in every round
    if room < 1:
        return Plan([], BUDGET)
    slots = min(settings.round_size, room)
    standings = races(history, settings)
    chosen: list[str] = []
    for name in _racing_picks(standings, settings):
        if len(chosen) < slots and name not in chosen:
            chosen.append(name)
    exploring = [level for level in settings.concurrency if not _explored(space, history, standings[level], settings)]
    asked = 0
    while len(chosen) < slots and exploring:
        level = exploring[asked % len(exploring)]
        proposed = _ask(space, history, settings, level, round_index, asked, chosen)
        asked += 1
        if proposed is None:
            break  # nothing left unmeasured
        chosen.append(proposed)
    if not chosen:
        settled = all(race.settled for race in standings.values())
        return Plan([], PRECISION if settled else BUDGET)
    return Plan(chosen)


def _racing_picks(standings: Mapping[int, racing.Race], settings: Settings) -> list[str]:
    """Leaders still too imprecise, then contenders by how far their upper bound reaches, round robin over the
    concurrencies (the baseline is launched every round anyway)."""
    queues: list[list[str]] = []
    for race in standings.values():
        if race.leader is None:
            continue
        queue = [] if race.settled or race.leader == BASELINE else [str(race.leader)]
        queue += sorted(
            (str(name) for name in race.contenders if name != BASELINE),
            key=lambda name: (-race.standings[name].high, name),
        )
        queues.append([name for name in queue if name not in queue[: queue.index(name)]])
    picks: list[str] = []
    for i in range(max((len(q) for q in queues), default=0)):
        picks += [q[i] for q in queues if i < len(q)]
    return picks


def _explored(space: SearchSpace, history: History, race: racing.Race, settings: Settings) -> bool:
    tried = [name for name in history.samples if name != BASELINE] + sorted(history.failed)
    if len(set(tried)) >= len(space.names):
        return True
    recent = [name for name in history.samples if name != BASELINE][-settings.patience :]
    if len(recent) < settings.patience:
        return False
    return not any(name == race.leader or name in race.contenders for name in recent)


def _speedups(history: History, level: int) -> dict[str, float]:
    """Each measured config's speedup over the baseline at `level` (geometric means); failed configs score 0."""
    cells = history.at(level)
    base = cells.get(BASELINE)
    scores = {name: 0.0 for name in sorted(history.failed)}  # sorted: the sampler sees trials in a fixed order
    if not base:
        return scores
    base_log = sum(math.log(v) for v in base) / len(base)
    for name, values in cells.items():
        if name != BASELINE:
            scores[name] = math.exp(sum(math.log(v) for v in values) / len(values) - base_log)
    return scores


def _ask(
    space: SearchSpace,
    history: History,
    settings: Settings,
    level: int,
    round_index: int,
    slot: int,
    taken: Sequence[str],
) -> str | None:
    """An unmeasured config Optuna proposes for `level` (None once every config was tried)."""
    import optuna  # here, not at the top: every Django process imports the models, few plan a round (0.3 s)

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    untried = [n for n in space.names if n not in history.samples and n not in history.failed and n not in taken]
    if not untried:
        return None
    seed = (settings.seed * 1_000_003 + round_index * 7919 + level * 104_729 + slot) % 2**31
    sampler = optuna.samplers.TPESampler(
        seed=seed,
        n_startup_trials=settings.startup_trials,
        multivariate=True,
        constant_liar=True,
    )
    study = optuna.create_study(direction="maximize", sampler=sampler)
    dists = space.distributions()
    speedups = _speedups(history, level)
    for name, value in speedups.items():
        study.add_trial(optuna.trial.create_trial(params=space.params_of(name), distributions=dists, value=value))
    for name in taken:  # already in this round: pending, so the sampler looks elsewhere
        study.add_trial(
            optuna.trial.create_trial(
                params=space.params_of(name), distributions=dists, state=optuna.trial.TrialState.RUNNING
            )
        )
    for _ in range(_ASKS_PER_SLOT):
        trial = study.ask(dists)
        proposed = space.name_of(trial.params)
        if proposed in untried:
            return proposed
        # Refused by SGLang's rules (scores 0, so the sampler learns the corner) or measured already.
        known = speedups.get(proposed, 0.0) if proposed else 0.0
        study.tell(trial, known)
    return untried[seed % len(untried)]
