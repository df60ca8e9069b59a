"""How often the history checks cry wolf, and how fast they see a real step, on simulated throughput series.

    python bench/regression_sim.py [--trials N] [--seed S]          # confirmed flags over whole lives, then the
                                                                    # old per-check flags for comparison
    python bench/regression_sim.py --tune [--trials N]              # the grid the confirmation defaults came from
    python bench/regression_sim.py --seeds 1,3,11,23,42 [--trials N] # whole lives of both series kinds, per seed

A throughput series is a level times (1 + Gaussian noise of 2%), the spread of repeated benchmark passes. An
acceptance series (a speculative config's accept length) is a level times the relative deviation of one cell's
accept length on the simulated host: `acceptance_noise` simulates cells with `simhost.speed`'s own draws (EAGLE3
2 steps, 3 draft tokens, per-token acceptance 0.62 with a per-request spread of 0.03, the simulated host's
defaults; 16 requests of 128 output tokens, a profile's defaults) and each value draws one of them. That assumes the
requests' acceptance is drawn afresh each run, as batch-dependent numerics of a real GPU do; on the simulated host
the same prompts accept the same drafts on every launch, so its own series are quieter than this.

Whole lives (what the web layer does now): each result is fed to `analysis.Watch`, the same two stages as
`actions.confirmations`: a suspicion queues a confirming run, whose value (drawn at the series' true level at that
moment) is fed at once, until the sequential test decides or the cap of confirming launches is reached; only a
confirmed change is a flag. "Results" are the ordinary results; confirming launches are counted apart, per 100
results, as the cost. A step counts as detected after k results when a confirmed flag in the right direction
whose index is within 3 of the step was raised by then (confirmations queued by those k results included).

Per check (the flags before confirmation existed): `analysis.assess_series` with its defaults (or --z-threshold /
--alpha), called on every prefix of the series. Stdlib only; about a minute at the default 1000 trials.
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
from simhost import speed

Noise = Callable[[random.Random], float]  # one value's factor on its series' true level

NOISE = 0.02
LENGTHS = (10, 20, 30, 40, 50, 60)
MAX_AFTER = 10  # new values after a step that detection is followed for
TOLERANCE = 3  # a detecting flag's index may be this far from the step


LIFE = 60  # results in a series' life
SEEDS = (1, 3, 11, 23, 42)


def throughput_noise(rng: random.Random) -> float:
    return 1 + rng.gauss(0, NOISE)


def acceptance_noise(rng: random.Random, cells: int = 4000) -> Noise:
    """A draw of one cell's accept length over its mean, from `cells` cells simulated with the simulated host's
    acceptance model (see the module docstring), and the spread it has (printed)."""
    params, steps, draft_tokens, requests, output_len = speed.SpeedParams(), 2, 3, 16, 128
    max_accepted = min(steps, draft_tokens - 1)
    lengths = []
    for _ in range(cells):
        tokens = verify_steps = 0
        for _ in range(requests):
            p = min(0.99, max(0.01, rng.gauss(params.accept_p, 0.03)))
            emitted = 1  # the prefill's token; every verify step then emits its accepted drafts and one bonus token
            while emitted < output_len:
                emitted += speed.draw_accepted(rng, p, max_accepted) + 1
                verify_steps += 1
            tokens += min(emitted, output_len) - 1
        lengths.append(tokens / verify_steps)
    mean = statistics.fmean(lengths)
    factors = [length / mean for length in lengths]
    print(f"Acceptance noise: {cells} simulated cells, accept length {mean:.3f}, relative sd "
          f"{statistics.stdev(factors):.2%}")  # fmt: skip
    return lambda draw: factors[draw.randrange(cells)]


def _watch_life(
    rng: random.Random, levels: list[float], options: dict[str, float], noise: Noise = throughput_noise
) -> tuple[analysis.Watch, list[int], int]:
    """Feed one life: `levels[i]` is the true level at the i-th ordinary result (confirming runs at that moment
    measure the same level). Returns the watch, the number of ordinary results seen before each flag, and the
    confirming launches spent."""
    watch = analysis.Watch(**options)  # type: ignore[arg-type]
    flagged_after: list[int] = []
    launches = 0
    for i, level in enumerate(levels):
        outcome = watch.feed(level * noise(rng))
        while outcome != analysis.CONFIRMED and watch.needs_confirmation:
            launches += 1
            outcome = watch.feed(level * noise(rng), confirming=True)
        if outcome == analysis.CONFIRMED:
            flagged_after.append(i + 1)
    return watch, flagged_after, launches


def _life_figures(
    rng: random.Random, trials: int, options: dict[str, float], noise: Noise = throughput_noise
) -> dict[str, float]:
    """False flags over stable lives, cost, and detection of a -5% step (20 values before) within 5 results."""
    ever = launches = 0
    for _ in range(trials):
        _, flagged_after, spent = _watch_life(rng, [100.0] * LIFE, options, noise)
        ever += bool(flagged_after)
        launches += spent
    detected = {name: 0 for name in ("-5%", "+5%")}
    for name, level in (("-5%", 95.0), ("+5%", 105.0)):
        for _ in range(trials):
            detected[name] += _detected_within(rng, 20, level, 5, options, noise=noise) is not None
    return {
        "life": ever / trials,
        "launches": 100 * launches / (trials * LIFE),
        "-5%": detected["-5%"] / trials,
        "+5%": detected["+5%"] / trials,
    }


def _detected_within(
    rng: random.Random,
    before: int,
    level: float,
    after: int,
    options: dict[str, float],
    start: float = 100.0,
    noise: Noise = throughput_noise,
) -> int | None:
    """After how many results at `level` (following `before` at `start`) a confirmed flag marks the step."""
    watch, _, _ = _watch_life(rng, [start] * before, options, noise)
    assert watch.values is not None and watch.flags is not None
    step, direction = len(watch.values), analysis.REGRESSION if level < start else analysis.IMPROVEMENT
    known = len(watch.flags)
    for k in range(1, after + 1):
        outcome = watch.feed(level * noise(rng))
        while outcome != analysis.CONFIRMED and watch.needs_confirmation:
            outcome = watch.feed(level * noise(rng), confirming=True)
        if any(
            suspicion.direction == direction and index >= step - TOLERANCE for index, suspicion in watch.flags[known:]
        ):
            return k
    return None


def per_seed(seeds: list[int], trials: int) -> None:
    """Whole lives of both series kinds with the defaults, one row per seed and kind: the promise on any seed."""
    print(f"Whole lives with the defaults, {trials} trials per figure")
    print(f"{'seed':>5} {'series':<11} {'lives flagged':>13} {'launches/100':>12} {'-5% in 5':>9} {'+5% in 5':>9}")
    for seed in seeds:
        rng = random.Random(seed)
        for name, noise in (("throughput", throughput_noise), ("acceptance", acceptance_noise(random.Random(seed)))):
            got = _life_figures(rng, trials, {}, noise)
            print(f"{seed:>5} {name:<11} {got['life']:>13.1%} {got['launches']:>12.2f} {got['-5%']:>9.1%}"
                  f" {got['+5%']:>9.1%}", flush=True)  # fmt: skip


def lives(rng: random.Random, trials: int) -> None:
    print("Whole lives, confirmed before flagging (analysis.Watch with its defaults)")
    ever = launches = suspicions = flags = 0
    for _ in range(trials):
        watch = analysis.Watch()
        flagged = False
        for _ in range(LIFE):
            outcome = watch.feed(100.0 * (1 + rng.gauss(0, NOISE)))
            suspicions += outcome == analysis.SUSPECTED
            while outcome != analysis.CONFIRMED and watch.needs_confirmation:
                launches += 1
                outcome = watch.feed(100.0 * (1 + rng.gauss(0, NOISE)), confirming=True)
            flagged |= outcome == analysis.CONFIRMED
            flags += outcome == analysis.CONFIRMED
        ever += flagged
    results = trials * LIFE
    print(f"  {'stable series, 60 results each':<52}")
    print(f"  {'  series flagged at least once (target <= 5%)':<52} {ever / trials:>8.2%}")
    print(f"  {'  false flags per 100 results':<52} {100 * flags / results:>8.3f}")
    print(f"  {'  suspicions per 100 results':<52} {100 * suspicions / results:>8.2f}")
    print(f"  {'  confirming launches per 100 results':<52} {100 * launches / results:>8.2f}")

    print(f"\n  Detection: share of series with a confirmed flag after k results at the new level, k = 1..{MAX_AFTER}")
    scenarios = [
        ("-5% step, 10 values before", 10, 100.0, 95.0),
        ("-5% step, 20 values before", 20, 100.0, 95.0),
        ("-5% step, 40 values before", 40, 100.0, 95.0),
        ("+5% step, 20 values before", 20, 100.0, 105.0),
        ("88.8 -> 82.2 (-7.4%), 20 values before", 20, 88.8, 82.2),
    ]
    for name, before, start, level in scenarios:
        after = [_detected_within(rng, before, level, MAX_AFTER, {}, start=start) for _ in range(trials)]
        by_k = [sum(a is not None and a <= k for a in after) / trials for k in range(1, MAX_AFTER + 1)]
        print(f"  {name:<40} " + " ".join(f"{d:>4.0%}" for d in by_k))

    delays = []
    for _ in range(trials):
        levels = [88.8] * 20 + [88.8 + (82.2 - 88.8) * (i + 1) / 20 for i in range(20)] + [82.2] * 10
        _, flagged_after, _ = _watch_life(rng, levels, {})
        first = next((n for n in flagged_after if n > 20), None)
        if first is not None:
            delays.append(first - 20)
    median = statistics.median(delays) if delays else float("nan")
    print("\n  Slow drift 88.8 -> 82.2 over 20 runs after 20 stable ones, confirmed")
    print(f"    flagged by the end of the slide {sum(d <= 20 for d in delays) / trials:.0%},", end=" ")
    print(f"by the end (10 runs after) {len(delays) / trials:.0%}; median {median:.0f} runs into the slide\n")


def tune(rng: random.Random, trials: int) -> None:
    """The grid the defaults were picked from: the most sensitive suspicion threshold and the cheapest settings
    that meet both targets (<= 5% of stable lives flagged, >= 95% of -5% steps flagged within 5 results)."""
    print(f"{'suspect z':>9} {'false_confirm':>13} {'max conf.':>9} {'lives flagged':>13} {'launches/100':>12}"
          f" {'-5% in 5':>9} {'+5% in 5':>9}")  # fmt: skip
    for z in (2.5, 2.6, 2.7, 2.8, 3.0):
        for false_confirm in (0.015, 0.025, 0.04):
            for max_confirmations in (3, 5, 6):
                options = {"suspect_z": z, "false_confirm": false_confirm, "max_confirmations": max_confirmations}
                got = _life_figures(rng, trials, options)
                ok = "  meets both" if got["life"] <= 0.05 and got["-5%"] >= 0.95 else ""
                print(f"{z:>9} {false_confirm:>13} {max_confirmations:>9} {got['life']:>13.1%}"
                      f" {got['launches']:>12.2f} {got['-5%']:>9.1%} {got['+5%']:>9.1%}{ok}", flush=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=1000, help="series per scenario (default 1000)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--z-threshold", type=float, help="check_latest's z threshold (default: the library's)")
    parser.add_argument("--alpha", type=float, help="change_points' significance level (default: the library's)")
    parser.add_argument("--tune", action="store_true", help="print the grid of confirmation settings and stop")
    parser.add_argument("--seeds", help="comma-separated seeds: whole lives of both series kinds per seed, then stop")
    args = parser.parse_args()
    options = {name: value for name, value in (("z_threshold", args.z_threshold), ("alpha", args.alpha)) if value}

    def assess(values: list[float]) -> list[analysis.RegressionFlag]:
        return analysis.assess_series(values, **options)

    rng = random.Random(args.seed)
    trials = args.trials
    started = time.monotonic()
    if args.seeds:
        per_seed([int(seed) for seed in args.seeds.split(",")], trials)
        print(f"\n{time.monotonic() - started:.0f} s")
        return
    if args.tune:
        tune(rng, trials)
        print(f"\n{time.monotonic() - started:.0f} s")
        return
    print(f"{trials} trials per row, seed {args.seed}, noise {NOISE:.0%} Gaussian.\n")
    lives(rng, trials)

    def noisy(level: float, count: int) -> list[float]:
        return [level * (1 + rng.gauss(0, NOISE)) for _ in range(count)]

    print(f"Per check, without confirmation (the flags before): assess_series options {options or 'defaults'}\n")
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
