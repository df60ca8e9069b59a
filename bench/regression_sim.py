"""How often the history checks cry wolf, and how fast they see a real step, on simulated throughput series.

    python bench/regression_sim.py [--trials N] [--seed S]

Every series is a level times (1 + Gaussian noise of 2%), the spread of repeated benchmark passes. Checks are
`analysis.assess_series` with its defaults (or --z-threshold / --alpha), as the web layer calls it; "as results
arrive" means it is called on every prefix of the series, once per new value.
Stdlib only; about ten seconds at the default 1000 trials.
"""

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments import analysis

NOISE = 0.02
LENGTHS = (10, 20, 30, 40, 50, 60)
MAX_AFTER = 10  # new values after a step that detection is followed for
TOLERANCE = 3  # a detecting flag's index may be this far from the step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=1000, help="series per scenario (default 1000)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--z-threshold", type=float, help="check_latest's z threshold (default: the library's)")
    parser.add_argument("--alpha", type=float, help="change_points' significance level (default: the library's)")
    args = parser.parse_args()
    options = {name: value for name, value in (("z_threshold", args.z_threshold), ("alpha", args.alpha)) if value}

    def assess(values: list[float]) -> list[analysis.RegressionFlag]:
        return analysis.assess_series(values, **options)

    rng = random.Random(args.seed)
    trials = args.trials
    started = time.monotonic()

    def noisy(level: float, count: int) -> list[float]:
        return [level * (1 + rng.gauss(0, NOISE)) for _ in range(count)]

    print(
        f"{trials} trials per row, seed {args.seed}, noise {NOISE:.0%} Gaussian;"
        f" assess_series options {options or 'defaults'}.\n"
    )
    print("False alarms, noise-only series")
    print(f"  {'series':<44} {'flagged':>8}")
    total = 0
    for length in LENGTHS:
        flagged = sum(bool(assess(noisy(100.0, length))) for _ in range(trials))
        total += flagged
        print(f"  {f'length {length}, checked once':<44} {flagged / trials:>8.2%}")
    print(f"  {'all lengths 10-60, checked once':<44} {total / (trials * len(LENGTHS)):>8.2%}")
    checks = alarms = ever = 0
    for _ in range(trials):
        series = noisy(100.0, 60)
        seen = [bool(assess(series[:n])) for n in range(2, 61)]
        checks += len(seen)
        alarms += sum(seen)
        ever += any(seen)
    print(f"  {'length 60, checked as each value arrives:':<44}")
    print(f"  {'  checks that flag':<44} {alarms / checks:>8.2%}")
    print(f"  {'  series flagged at least once':<44} {ever / trials:>8.2%}")

    print(f"\nDetection of a step: share of series flagged (index within {TOLERANCE} of the step, right direction)")
    print(f"after k new values, checked as each value arrives; k = {', '.join(map(str, range(1, MAX_AFTER + 1)))}")
    scenarios: list[tuple[str, int, Callable[[int], list[float]]]] = [
        ("-5% step, 10 values before", 10, lambda h: noisy(100.0, h) + noisy(95.0, MAX_AFTER)),
        ("-5% step, 20 values before", 20, lambda h: noisy(100.0, h) + noisy(95.0, MAX_AFTER)),
        ("-5% step, 40 values before", 40, lambda h: noisy(100.0, h) + noisy(95.0, MAX_AFTER)),
        ("+5% step, 20 values before", 20, lambda h: noisy(100.0, h) + noisy(105.0, MAX_AFTER)),
        ("88.8 -> 82.2 (-7.4%), 20 values before", 20, lambda h: noisy(88.8, h) + noisy(82.2, MAX_AFTER)),
    ]
    for name, before, make in scenarios:
        direction = analysis.IMPROVEMENT if name.startswith("+") else analysis.REGRESSION
        detected_after = [0] * (MAX_AFTER + 1)
        for _ in range(trials):
            series = make(before)
            for k in range(1, MAX_AFTER + 1):
                flags = assess(series[: before + k])
                if any(f.direction == direction and abs(f.index - before) <= TOLERANCE for f in flags):
                    for later in range(k, MAX_AFTER + 1):
                        detected_after[later] += 1
                    break
        print(f"  {name:<40} " + " ".join(f"{d / trials:>4.0%}" for d in detected_after[1:]))

    # The baseline that silently moved: 88.8 for 20 runs, then a slide to 82.2 over 20 runs, then flat.
    ramp_delays = []
    for _ in range(trials):
        levels = [88.8] * 20 + [88.8 + (82.2 - 88.8) * (i + 1) / 20 for i in range(20)] + [82.2] * 10
        series = [level * (1 + rng.gauss(0, NOISE)) for level in levels]
        for n in range(21, len(series) + 1):
            if any(f.direction == analysis.REGRESSION and f.index >= 15 for f in assess(series[:n])):
                ramp_delays.append(n - 20)
                break
    by_end = sum(d <= 20 for d in ramp_delays) / trials
    by_end_5 = sum(d <= 25 for d in ramp_delays) / trials
    median = statistics.median(ramp_delays) if ramp_delays else float("nan")
    print("\nSlow drift 88.8 -> 82.2 over 20 runs after 20 stable ones (regression flagged at index >= 15)")
    print(f"  flagged by the end of the slide {by_end:.0%}, within 5 runs after it {by_end_5:.0%},")
    print(f"  by the end (10 runs after) {len(ramp_delays) / trials:.0%}; median {median:.0f} runs into the slide")

    located = extra = 0
    for _ in range(trials):
        flags = analysis.change_points(
            noisy(100.0, 30) + noisy(95.0, 30), **{k: v for k, v in options.items() if k == "alpha"}
        )
        located += any(abs(f.index - 30) <= 1 for f in flags)
        extra += sum(abs(f.index - 30) > 1 for f in flags)
    print("\nLocation: change_points on 30 values + 30 values 5% lower")
    print(f"  step found at index 30 +-1: {located / trials:.1%}; other change points per series: {extra / trials:.3f}")
    print(f"\n{time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
