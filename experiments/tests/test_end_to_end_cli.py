"""The `specdash` command against a live specdash: the real web server (daphne), a Celery worker, the simulated
host behind a real sshd. Two experiments on the default profile (random ids at temperature 0) are submitted once per
module: one whose EAGLE-3 candidate's draft path changes outputs, with `submit --wait --fail-on ...` while `logs -f`
follows the candidate's run, and a clean one (an honest EAGLE-3 candidate) under the docs' recommended gate. The
tests read what they printed and wrote, then gate the finished experiments again for each exit code."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from simhost import hostsetup
from simhost.ports import free_port

from .cli_support import REPO, Result, run_cli_process
from .test_end_to_end import _eagle

# The module's fixture commits its user, host and experiment outside any test's transaction and flushes them after
# the module (as a transactional test's teardown does); each test only reads, in a transaction of its own. (The
# mark also makes pytest-django create the test database for a session of these tests alone.)
pytestmark = [pytest.mark.integration, pytest.mark.django_db]
# Two ranks, not the eight of the real model: each rank is a process the loaded machine starts at every launch,
# and nothing here depends on how many there are (the simulated speed does not).
TP_SIZE = 2


# The CI gate docs/api.md recommends.
DOCS_GATE = "regression,outputs-differ,slower,accept-drop:2%"


@dataclass
class Submitted:
    url: str
    token: str
    work: Path
    experiment_id: int
    run_ids: dict[str, int]
    submit: Result
    logs: Result
    junit: Path
    markdown: Path
    clean: Result  # the clean experiment's `submit --wait --fail-on DOCS_GATE`
    clean_id: int

    def cli(self, *argv: str) -> Result:
        return run_cli_process(*argv, url=self.url, token=self.token, cwd=self.work)


def _member_token_and_host(sshd, work: Path) -> tuple[str, str]:
    from django.contrib.auth import get_user_model

    from experiments.actions.audit import Actor
    from experiments.actions.users import do_set_role
    from experiments.models import ApiToken, Host, SshKey

    user = get_user_model().objects.create_user("ci-bot")
    do_set_role(user, "member", Actor.command())
    _, token = ApiToken.issue(user, name="ci")
    public_key = (sshd.key_dir / f"{sshd.client_key_name}.pub").read_text().split()
    key, _ = SshKey.objects.get_or_create(
        name="test-key", defaults={"file_name": sshd.client_key_name, "public_key": " ".join(public_key[:2])}
    )
    state_dir = work / "simhost-state"
    state_dir.mkdir()
    host = Host.objects.create(
        name=f"sim-cli-{uuid.uuid4().hex[:6]}", address="127.0.0.1", port=sshd.port, username=sshd.username,
        ssh_key=key, host_key=sshd.host_key, work_dir=str(work / "host-work"),
        models_root=str(hostsetup.MODELS_ROOT),
        shell_setup=hostsetup.shell_setup(state_dir, 0.5, hostsetup.FAST_HEALTH_POLL_SECONDS),
        launcher=hostsetup.LAUNCHER, python="python", server_port=free_port(),
        gpu_inventory=[{"index": i, "name": "NVIDIA H200 (simulated)"} for i in range(8)],
        extra_env_prefixes=["SIMHOST_"],
    )  # fmt: skip
    return token, host.name


def _experiment_file(work: Path, host: str, *, clean: bool) -> Path:
    """An experiment on the default profile (random ids, temperature 0): the clean one's EAGLE-3 candidate is honest,
    the other's draft path changes its outputs after four tokens."""
    models = str(hostsetup.MODELS_ROOT)
    if clean:
        candidate = _eagle(models, "eagle3", 2)
        # A draft the target accepts 95% of the time (the simulator's default: 62%): a speedup far above what a
        # loaded machine's clock can blur (1.1x at the default came out inconclusive at a load of 9 on 2 cores).
        candidate["env"] = {**candidate["env"], "SIMHOST_ACCEPT_P": "0.95"}
    else:
        candidate = _eagle(models, "eagle3-draft-bug", 2)
        candidate["env"] = {**candidate["env"], "SIMHOST_FAULTS": "draft_bug", "SIMHOST_DRAFT_BUG_AFTER": "4"}
    body = {
        "name": "cli clean" if clean else "cli | <gate> & co",  # a name the JUnit and Markdown files must escape
        "host": host,
        "baseline": {"name": "baseline", "model_path": f"{models}/kimi-k2.5-sim", "tp_size": TP_SIZE},
        "candidates": [{**candidate, "tp_size": TP_SIZE}],
        "profile": {
            "concurrency": [1],
            "num_prompts": 4,
            "input_len": 64,
            "output_len": 24,
            "passes": 6 if clean else 2,  # the clean one's verdict must settle under load: six samples a side
            "launches": 1,
            "warmup_requests": 0,
            "stall_timeout_s": 60,
            "readiness_timeout_s": 120,
        },
    }
    path = work / ("clean.yaml" if clean else "experiment.yaml")
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def submitted(django_db_setup, django_db_blocker, sshd, live_web, celery_worker_process, tmp_path_factory):
    from django.core.management import call_command

    work = tmp_path_factory.mktemp("cli")
    with django_db_blocker.unblock():
        token, host = _member_token_and_host(sshd, work)
    path = _experiment_file(work, host, clean=False)
    env_cli = [sys.executable, "-m", "experiments.cli"]
    env = {**os.environ, "SPECDASH_URL": live_web, "SPECDASH_TOKEN": token, "PYTHONPATH": str(REPO)}
    junit, markdown = work / "gate.xml", work / "gate.md"
    argv = [*env_cli, "submit", str(path), "--wait", "--poll", "0.5", "--fail-on", "outputs-differ,regression",
            "--junit", str(junit), "--markdown", str(markdown), "--timeout", "300"]  # fmt: skip
    clean_argv = [*env_cli, "submit", str(_experiment_file(work, host, clean=True)), "--wait", "--poll", "0.5",
                  "--fail-on", DOCS_GATE, "--timeout", "300"]  # fmt: skip
    try:
        submit = subprocess.Popen(argv, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        clean = subprocess.Popen(
            clean_argv, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        assert submit.stdout is not None
        head = [submit.stdout.readline() for _ in range(3)]  # "Experiment N submitted: URL", then a line per run
        experiment_id = int(re.search(r"Experiment (\d+) submitted", head[0]).group(1))  # type: ignore[union-attr]
        run_ids = {
            m.group(2): int(m.group(1)) for m in (re.search(r"run (\d+) (\S+):", line) for line in head[1:]) if m
        }
        # The candidate's log, followed from the moment it is queued until its run has ended.
        follow = subprocess.run(
            [*env_cli, "logs", "-f", str(run_ids["eagle3-draft-bug"]), "--poll", "0.5"],
            cwd=work, env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        out, err = submit.communicate(timeout=300)
        clean_out, clean_err = clean.communicate(timeout=300)
        clean_id = int(re.search(r"Experiment (\d+) submitted", clean_out).group(1))  # type: ignore[union-attr]
        yield Submitted(
            url=live_web, token=token, work=work, experiment_id=experiment_id, run_ids=run_ids,
            submit=Result(submit.returncode, "".join(head) + out, err),
            logs=Result(follow.returncode, follow.stdout, follow.stderr), junit=junit, markdown=markdown,
            clean=Result(clean.returncode, clean_out, clean_err), clean_id=clean_id,
        )  # fmt: skip
    finally:
        with django_db_blocker.unblock():
            time.sleep(0.5)  # (the worker's last writes of a run that a failed assertion left running)
            call_command("flush", interactive=False, verbosity=0)  # as a transactional test's teardown does


def test_submit_waits_with_a_line_per_run_then_fails_the_gate_on_outputs_that_differ(submitted):
    result = submitted.submit

    assert result.code == 1, result.out + result.err
    assert "run {} baseline (launch 1): benchmarking".format(submitted.run_ids["baseline"]) in result.err
    assert "run {} eagle3-draft-bug (launch 1): succeeded".format(submitted.run_ids["eagle3-draft-bug"]) in result.err
    assert f"{submitted.url}/experiments/{submitted.experiment_id}/" in result.out
    # The verdict table, then each check with its numbers, then the outcome.
    assert re.search(r"eagle3-draft-bug\s+1\s+[\d.]+\s+[\d.]+\s+[\d.]+x.*outputs differ", result.out), result.out
    assert (
        "FAILED       outputs-differ eagle3-draft-bug: outputs differ from the baseline's at temperature 0: 4 of 4 "
        "prompts part" in result.out
    )
    assert "PASSED       regression baseline c=1: no open regression flag" in result.out
    assert "specdash gate: a gate failed (exit 1)" in result.out


def test_the_junit_file_holds_one_testcase_per_gate_and_config_escaped(submitted):
    root = ET.parse(submitted.junit).getroot()

    suite = root.find("testsuite")
    assert (
        suite is not None and suite.get("name") == f"specdash experiment {submitted.experiment_id}: cli | <gate> & co"
    )
    cases = {(c.get("classname"), c.get("name")): c for c in suite.iter("testcase")}
    assert set(cases) == {
        ("specdash.outputs-differ", "eagle3-draft-bug"),
        ("specdash.regression", "baseline c=1"),
        ("specdash.regression", "eagle3-draft-bug c=1"),
    }
    failure = cases["specdash.outputs-differ", "eagle3-draft-bug"].find("failure")
    assert failure is not None and "4 of 4 prompts" in failure.get("message", "")
    assert cases["specdash.regression", "baseline c=1"].find("failure") is None
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("3", "1", "0")
    url = {p.get("name"): p.get("value") for p in suite.iter("property")}["url"]
    assert url == f"{submitted.url}/experiments/{submitted.experiment_id}/"
    assert b"cli | &lt;gate&gt; &amp; co" in submitted.junit.read_bytes()


def test_the_markdown_summary_links_the_experiment_and_escapes_its_name(submitted):
    text = submitted.markdown.read_text()

    link = f"({submitted.url}/experiments/{submitted.experiment_id}/)"
    assert text.startswith(f"## specdash gate failed: [experiment {submitted.experiment_id} cli \\| \\<gate\\> & co]")
    assert link in text
    assert (
        "| outputs-differ | eagle3-draft-bug |  | ❌ failed | outputs differ from the baseline's at temperature 0: "
        "4 of 4" in text
    )
    assert "| regression | baseline | 1 | ✅ passed |" in text


def test_logs_follow_printed_the_runs_whole_log_and_ended_with_it(submitted):
    lines = submitted.logs.out.splitlines()

    assert submitted.logs.code == 0, submitted.logs.err
    assert any("The server is fired up and ready to roll!" in line for line in lines)
    stored = submitted.cli("runs", "--experiment", str(submitted.experiment_id), "--json")
    by_id = {r["id"]: r for r in json.loads(stored.out)}
    assert len(lines) == by_id[submitted.run_ids["eagle3-draft-bug"]]["log_lines"]  # every line, once


def test_gate_exits_0_when_every_gate_it_names_passes(submitted):
    experiment = str(submitted.experiment_id)

    result = submitted.cli("gate", experiment, "--fail-on", "regression,accept-drop:2%", "--against", experiment)

    assert result.code == 0, result.out + result.err
    assert re.search(r"PASSED\s+accept-drop:2% eagle3-draft-bug c=1: accept length [\d.]+ against [\d.]+", result.out)
    assert "every gate passed (exit 0)" in result.out


def test_the_docs_gate_passes_the_clean_experiment_and_fails_the_draft_bug(submitted):
    """docs/api.md's gate on the default profile: random ids at temperature 0 compare outputs too, and an accept
    length with no earlier run in its series passes, saying so."""
    clean = submitted.clean
    buggy = submitted.cli("gate", str(submitted.experiment_id), "--fail-on", DOCS_GATE)

    assert clean.code == 0, clean.out + clean.err
    assert "PASSED       outputs-differ eagle3: outputs match the baseline's at temperature 0" in clean.out
    # Faster, or at least not slower with its interval above 1: which, the machine's load may decide (the client's
    # own time on a loaded machine narrows the ratio); never failed or inconclusive.
    assert re.search(r"PASSED\s+slower eagle3 c=1: (faster|not slower \(its interval lies above 1\)): ", clean.out)
    assert "the first accept length of its series" in clean.out
    assert "every gate passed (exit 0)" in clean.out
    assert buggy.code == 1, buggy.out + buggy.err
    assert "FAILED       outputs-differ eagle3-draft-bug: outputs differ" in buggy.out


def test_gate_exits_2_when_a_result_it_needs_is_inconclusive_or_on_an_error(submitted):
    experiment = str(submitted.experiment_id)

    # The clean experiment measured no eagle3-draft-bug: nothing to compare this one's accept length with.
    elsewhere = submitted.cli(
        "gate", experiment, "--fail-on", "accept-drop:2%", "--against", str(submitted.clean_id), "--json"
    )
    missing = submitted.cli("gate", "999999", "--fail-on", "slower")
    refused = run_cli_process("status", url=submitted.url, token="sd_wrong", cwd=submitted.work)
    bad_spec = submitted.cli("gate", experiment, "--fail-on", "faster")

    report = json.loads(elsewhere.out)
    assert elsewhere.code == 2 and report["exit"] == 2
    assert [c["outcome"] for c in report["checks"]] == ["inconclusive"]
    assert f"experiment {submitted.clean_id} measured no accept length for it" in report["checks"][0]["message"]
    assert missing.code == 2 and "404" in missing.err
    assert refused.code == 2 and "token was refused (401)" in refused.err
    assert bad_spec.code == 2 and "unknown gate 'faster'" in bad_spec.err


def test_status_and_export_read_the_finished_experiment(submitted):
    status = submitted.cli("status", str(submitted.experiment_id))
    exported = submitted.cli("export", str(submitted.experiment_id), "--format", "csv")

    assert status.code == 0 and "finished" in status.out and "eagle3-draft-bug" in status.out
    assert exported.code == 0 and exported.out.splitlines()[0].startswith("candidate,concurrency,baseline_tok_s")
