"""History checks after each result: the flags they raise, and the series they leave alone."""

from __future__ import annotations

import random

import pytest

from experiments.models import Flag

from .factories import make_config, make_history

pytestmark = pytest.mark.django_db


def test_it_flags_the_baseline_that_silently_moved_from_88_8_to_82_2():
    noise = random.Random(7)
    values = [88.8 * (1 + noise.gauss(0, 0.005)) for _ in range(10)] + [
        82.2 * (1 + noise.gauss(0, 0.005)) for _ in range(3)
    ]

    runs = make_history(values)

    flags = list(Flag.objects.all())
    assert len(flags) == 1, [(f.kind, f.run_id, f.change) for f in flags]
    flag = flags[0]
    assert flag.direction == "regression"
    assert flag.change == pytest.approx(-0.074, abs=0.01)
    assert flag.run_id == runs[10].pk  # the first run at the new level
    assert flag.triage == Flag.Triage.UNTRIAGED
    assert flag.concurrency == 1 and flag.profile_label.startswith("128 in / 128 out")


def test_it_leaves_a_stable_series_alone():
    noise = random.Random(3)

    make_history([90 * (1 + noise.gauss(0, 0.01)) for _ in range(25)])

    assert not Flag.objects.exists()


def test_it_labels_an_improvement():
    make_history([80.0, 80.4, 79.8, 80.1, 80.2, 79.9, 80.0, 80.3, 80.1, 86.0, 86.3, 85.8])

    assert [f.direction for f in Flag.objects.all()] == ["improvement"]


def test_it_keeps_series_of_different_hosts_apart():
    config = make_config(name="baseline")
    make_history([88.8] * 10, config=config)
    make_history([82.2] * 3, config=config)  # another host: its own series, too short to judge

    assert not Flag.objects.exists()
