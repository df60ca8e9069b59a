"""Fixtures of the domain's tests: an experiment of a baseline and one EAGLE-3 candidate, and its first run; the
`specdash` command run in process (`cli`, in a config directory of its own, `cli_home`)."""

from __future__ import annotations

import pytest

from .cli_support import cli, cli_home  # noqa: F401  (fixtures)
from .factories import make_eagle_config, make_experiment


@pytest.fixture
def experiment():
    return make_experiment(name="eagle3 vs baseline", candidates=[make_eagle_config(name="eagle3-2step")])


@pytest.fixture
def run(experiment):
    return experiment.run_set.order_by("sequence").first()
