"""The flags the host's SGLang lists in its --help: read into a listing, and a config flag it lacks refused at
submission, naming the flag and the version. The listing here is parsed from simhost's real --help output (the
over-SSH read is workers/tests/test_server_flags_over_ssh.py)."""

from __future__ import annotations

import argparse
import copy
import os
import subprocess
import sys

import pytest
from django.utils import timezone

from experiments.actions.hosts import do_read_host_again_for_version
from experiments.models import ApiToken, Experiment, Run, ServerConfig
from experiments.rules import server_flags
from simhost import hostsetup

from .factories import experiment_payload, make_eagle_config, make_experiment, make_host
from .test_api_remedies import CONTEXT_ERROR


def _help_of(version: str) -> str:
    env = {**os.environ, "SIMHOST_SGLANG_VERSION": version, "PYTHONPATH": str(hostsetup.REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "simhost.launch_server", "--help"], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def flags_0_5_23() -> list[str]:
    return server_flags.parse_help(_help_of("0.5.23"))


def test_it_reads_every_option_of_an_argparse_help_aliases_included():
    parser = argparse.ArgumentParser(prog="launch_server")
    parser.add_argument("--model-path", required=True)
    parser.add_argument("--tp-size", "--tp", type=int)
    parser.add_argument("--enable-metrics", action="store_true")
    parser.add_argument("--cuda-graph-bs", nargs="+", type=int)

    flags = server_flags.parse_help(parser.format_help())

    assert flags == ["--cuda-graph-bs", "--enable-metrics", "--help", "--model-path", "--tp", "--tp-size"]


def test_a_help_that_is_not_sglangs_gives_no_listing():
    with pytest.raises(server_flags.NotSGLangHelp, match="No module named sglang"):
        server_flags.parse_help("/usr/bin/python3: No module named sglang\n")
    with pytest.raises(server_flags.NotSGLangHelp):
        server_flags.parse_help("usage: x --model-path P " + " ".join(f"--f{i}" for i in range(4000)))


def test_the_listing_follows_the_version_as_sglang_renamed_its_flags(flags_0_5_23):
    older = server_flags.parse_help(_help_of("0.5.9"))

    assert "--cuda-graph-max-bs" in older and "--cuda-graph-max-bs" not in flags_0_5_23
    assert "--cuda-graph-max-bs-decode" in flags_0_5_23 and "--speculative-adaptive" in flags_0_5_23


def test_unknown_flags_are_the_options_a_listing_lacks_once_each_with_or_without_a_value(flags_0_5_23):
    known = frozenset(flags_0_5_23)
    args = ["--cuda-graph-max-bs", "8", "--cuda-graph-max-bs=16", "--mem-fraction-static", "0.8", "--no-such-flag"]

    assert server_flags.unknown_flags(args, known) == ["--cuda-graph-max-bs", "--no-such-flag"]
    assert server_flags.unknown_flags(["--mem-fraction-static", "--8"], known) == ["--8"]


def test_a_listing_read_with_another_launcher_speaks_for_nothing(flags_0_5_23):
    stored = server_flags.listing("python -m sglang.launch_server", "0.5.23", flags_0_5_23)

    assert server_flags.known_flags(stored, "python -m sglang.launch_server") == frozenset(flags_0_5_23)
    assert server_flags.known_flags(stored, "/opt/other/bin/python -m sglang.launch_server") is None
    assert server_flags.known_flags({}, "python -m sglang.launch_server") is None


@pytest.mark.django_db
def test_a_submission_with_a_flag_the_hosts_version_lacks_is_refused_and_nothing_saved(client, owner, flags_0_5_23):
    host = make_host(name="gpu8")
    host.server_flags = server_flags.listing(host.launcher, "0.5.23", flags_0_5_23)
    host.server_flags_at = timezone.now()
    host.save(update_fields=["server_flags", "server_flags_at"])
    _, token = ApiToken.issue(owner)
    payload = copy.deepcopy(experiment_payload(host))
    payload["candidates"][0]["extra_args"] = ["--cuda-graph-max-bs", "8"]
    configs_before = ServerConfig.objects.count()

    refused = client.post(
        "/api/experiments", payload, content_type="application/json", headers={"Authorization": f"Bearer {token}"}
    )

    assert refused.status_code == 409, refused.content  # a flag the host's SGLang lacks
    message = refused.json()["errors"]["candidates.0.extra_args"][0]
    assert message.startswith("SGLang 0.5.23 on gpu8 does not know the flag --cuda-graph-max-bs (its launch_server")
    assert not Experiment.objects.exists() and ServerConfig.objects.count() == configs_before

    payload["candidates"][0]["extra_args"] = ["--cuda-graph-max-bs-decode", "8"]
    accepted = client.post(
        "/api/experiments", payload, content_type="application/json", headers={"Authorization": f"Bearer {token}"}
    )
    assert accepted.status_code == 201, accepted.content


@pytest.mark.django_db
def test_a_run_on_another_sglang_version_asks_for_the_host_to_be_read_again(
    sent,
    django_capture_on_commit_callbacks,
    flags_0_5_23,
):
    host = make_host(name="gpu8")
    host.server_flags = server_flags.listing(host.launcher, "0.5.9", flags_0_5_23)
    host.save(update_fields=["server_flags"])

    with django_capture_on_commit_callbacks(execute=True):
        same = do_read_host_again_for_version(host, "0.5.9")
        unknown = do_read_host_again_for_version(host, None)
        upgraded = do_read_host_again_for_version(host, "0.5.23")

    assert (same, unknown, upgraded) == (False, False, True)
    assert [name for name, _ in sent] == ["workers.tasks.list_host_models"]


@pytest.mark.django_db
def test_a_remedy_whose_flag_the_hosts_version_lacks_is_refused_before_anything_is_queued(client, owner):
    # A remedy is a config made by the same form as one typed by hand, so the host's listing holds for it too: a
    # listing without --context-length refuses the "serve at most N tokens" re-run rather than queueing launches
    # that fail on an unknown flag.
    candidate = make_eagle_config(name="eagle3")
    experiment = make_experiment(candidates=[candidate])
    host = experiment.host
    listed = [flag for flag in server_flags.parse_help(_help_of("0.5.23")) if flag != "--context-length"]
    host.server_flags = server_flags.listing(host.launcher, "0.5.23", listed)
    host.server_flags_at = timezone.now()
    host.save(update_fields=["server_flags", "server_flags_at"])
    run = experiment.run_set.get(config=candidate)
    Run.objects.filter(pk=run.pk).update(
        state=Run.State.FAILED, failure_kind=Run.FailureKind.CONTEXT_LENGTH, failure_message=CONTEXT_ERROR
    )
    _, token = ApiToken.issue(owner)
    runs_before = Run.objects.count()

    refused = client.post(
        f"/api/runs/{run.pk}/remedy", {"remedy": "context-length"}, content_type="application/json",
        headers={"Authorization": f"Bearer {token}"},
    )  # fmt: skip

    assert refused.status_code == 409, refused.content
    assert "does not know the flag --context-length" in refused.content.decode()
    assert Run.objects.count() == runs_before and not ServerConfig.objects.filter(derived_from=candidate).exists()
