"""How many launches an auto-tuning study needs to find a config within 2% of the true best at each concurrency,
against the full grid's launches, scored on the simulated host's ground truth.

    python bench/autotune.py [--studies N] [--seed S] [--tolerance 0.02] [--grid-launches 3] [--round-size 5]
        [--launch-noise 0.005] [--cell-noise 0.01] [--max-launches N]

The space is the one an EAGLE-3 team would type: steps 1-4 x topk 1, 2, 4, 8 x draft tokens 2, 3, 4, 6, 8 at
concurrencies 1, 2, 4, 8, on kimi-k2.5-sim with 128 in / 128 out (`simhost.speed.ground_truth`; its table is in
simhost/README.md). SGLang's rules (`experiments.rules.sweeps`) leave the valid configs; those the host runs out of
memory on (topk x draft tokens > 32) are in the grid too, since nobody knows them before launching.

Each study runs `experiments.tuning.plan` (the code a real study runs) with launches drawn from the ground truth:
one launch measures every concurrency; its tok/s at each is the truth x a per-launch factor N(1, launch noise)
(SIMHOST_LAUNCH_NOISE's default) x a per-cell factor N(1, cell noise) (the per-step noise and the per-request
acceptance spread, averaged over a cell's requests); a config out of memory fails its launch (the launch counts).
A study is right at a concurrency when the true throughput of its recommendation (the baseline for "no
speculation") is within the tolerance of the best true throughput there, baseline included.
The full grid: every config of the grid and the baseline, `--grid-launches` launches each.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.rules import sweeps
from experiments.tuning import plan, recommend
from experiments.tuning.space import SearchSpace
from simhost import speed

CONCURRENCY = (1, 2, 4, 8)
SWEEP = sweeps.Sweep(steps=(1, 2, 3, 4), topk=(1, 2, 4, 8), draft_tokens=(2, 3, 4, 6, 8))
BASE = {"name": "eagle3", "speculative_algorithm": "EAGLE3", "extra_args": [], "env": {}}


def truth_of(space: SearchSpace) -> dict[str, dict[int, float | None]]:
    def cfg(name: str) -> speed.SpecConfig:
        if name == plan.BASELINE:
            return speed.SpecConfig()
        c = space.candidate(name)
        return speed.SpecConfig("EAGLE3", c[sweeps.STEPS], c[sweeps.TOPK], c[sweeps.DRAFT], overlap=False)

    return {name: {c: speed.ground_truth(cfg(name), c) for c in CONCURRENCY} for name in [plan.BASELINE, *space.names]}


def run_study(
    space: SearchSpace, truth: dict[str, dict[int, float | None]], settings: plan.Settings, rng: random.Random, args
) -> tuple[plan.History, str, list[tuple[int, dict[int, str | None]]]]:
    """One study; also its leader per concurrency after each round (launches spent then, leaders)."""
    history = plan.History()
    leaders: list[tuple[int, dict[int, str | None]]] = []

    def launch(name: str) -> None:
        history.launches += 1
        if truth[name][CONCURRENCY[0]] is None:
            history.failed.add(name)
            return
        factor = rng.gauss(1, args.launch_noise)
        history.add(name, {c: truth[name][c] * factor * rng.gauss(1, args.cell_noise) for c in CONCURRENCY})  # type: ignore[operator]

    for round_index in range(10_000):
        step = plan.plan_round(space, history, settings, round_index)
        if step.stop:
            return history, step.stop, leaders
        launch(plan.BASELINE)
        for name in step.candidates:
            launch(name)
        races = plan.races(history, settings)
        leaders.append((history.launches, {c: races[c].leader for c in CONCURRENCY}))
    raise AssertionError("a study that never stops")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--studies", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--tolerance", type=float, default=0.02)
    parser.add_argument("--grid-launches", type=int, default=3)
    parser.add_argument("--round-size", type=int, default=5)
    parser.add_argument("--patience", type=int, default=10)
    parser.add_argument("--launch-noise", type=float, default=0.005)
    parser.add_argument("--cell-noise", type=float, default=0.01)
    parser.add_argument("--max-launches", type=int, default=0, help="budget (default: 30%% of the grid's launches)")
    args = parser.parse_args()

    space = SearchSpace.build(BASE, SWEEP)
    truth = truth_of(space)
    grid_launches = (len(space.names) + 1) * args.grid_launches
    budget = args.max_launches or int(0.3 * grid_launches)
    oom = sum(1 for name in space.names if truth[name][1] is None)
    print(f"space: {len(space.names)} configs SGLang runs ({oom} out of memory on the host), concurrency {CONCURRENCY}")
    print(f"full grid: {grid_launches} launches ({args.grid_launches} per config, baseline included); budget {budget}")
    for c in CONCURRENCY:
        true_best = max((v[c] or 0.0, name) for name, v in truth.items())
        print(f"  true best at c={c}: {true_best[1]} {true_best[0] / truth[plan.BASELINE][c]:.3f}x")  # type: ignore[operator]

    rng = random.Random(args.seed)
    right = {c: 0 for c in CONCURRENCY}
    to_find: dict[int, list[int]] = {c: [] for c in CONCURRENCY}
    all_right, launches, stops, started = 0, [], {}, time.monotonic()  # type: ignore[var-annotated]
    for study in range(args.studies):
        settings = plan.Settings(
            concurrency=CONCURRENCY,
            tolerance=args.tolerance,
            max_launches=budget,
            round_size=args.round_size,
            seed=args.seed * 10_000 + study,
            patience=args.patience,
        )
        history, stop, leaders = run_study(space, truth, settings, rng, args)
        launches.append(history.launches)
        stops[stop] = stops.get(stop, 0) + 1
        ok = True
        for best in recommend.best_per_concurrency(history, settings):
            top = max(v[best.concurrency] or 0.0 for v in truth.values())
            hit = (truth[best.config][best.concurrency] or 0.0) >= top * (1 - args.tolerance)
            right[best.concurrency] += hit
            ok = ok and hit
            if hit:  # launches after which the leader there was right to the end
                found = history.launches
                for launches_then, leader in reversed(leaders):
                    name = leader[best.concurrency]
                    if name is None or (truth[name][best.concurrency] or 0.0) < top * (1 - args.tolerance):
                        break
                    found = launches_then
                to_find[best.concurrency].append(found)
        all_right += ok
    n = args.studies
    print(f"{n} studies in {time.monotonic() - started:.0f} s; stopped by {stops}")
    print(
        f"launches per study: mean {statistics.fmean(launches):.1f} ({statistics.fmean(launches) / grid_launches:.0%}"
        f" of the grid), median {statistics.median(launches):.0f}, max {max(launches)}"
    )
    for c in CONCURRENCY:
        spent = sorted(to_find[c])
        p90 = spent[int(0.9 * (len(spent) - 1))] if spent else 0
        print(
            f"  right at c={c}: {right[c] / n:.1%}; launches until its answer was right for good: median "
            f"{statistics.median(spent) if spent else 0:.0f} ({statistics.median(spent) / grid_launches:.0%} of the "
            f"grid), p90 {p90}"
        )
    print(f"right at every concurrency: {all_right / n:.1%}")


if __name__ == "__main__":
    main()
