"""The `specdash` commands that read or change one thing, in process against the API, and the API additions they
read: `GET /api/experiments`, `GET /api/runs`, `export.json`, and the experiment's `headline` and `accept_length`."""

from __future__ import annotations

import csv
import io
import json

import pytest
import yaml
from django.utils import timezone

from experiments.cli import credentials
from experiments.models import ApiToken, Experiment, Run

from .cli_support import IN_PROCESS_URL
from .factories import (
    experiment_payload,
    make_eagle_config,
    make_experiment,
    make_host,
    make_log,
    make_measurement,
    make_profile,
    make_run,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def logged_in(cli_home, owner):
    _, token = ApiToken.issue(owner)
    credentials.save(IN_PROCESS_URL, token)
    return token


def _measured(experiment, values: dict[str, float], accept: float = 2.5) -> None:
    """Succeed every run with two passes at c=1 (`values` by config name), accept length on speculative ones."""
    for run in experiment.run_set.select_related("config"):
        run.state, run.finished_at = Run.State.SUCCEEDED, timezone.now()
        run.save(update_fields=["state", "finished_at"])
        for pass_index, jitter in enumerate((0.99, 1.01)):
            extra = {"accept_length": accept * jitter} if run.config.is_speculative else {}
            make_measurement(run, concurrency=1, output_throughput=values[run.config.name] * jitter,
                             pass_index=pass_index, **extra)  # fmt: skip


def test_status_lists_the_latest_experiments_and_one_with_its_verdicts(cli, logged_in):
    candidate = make_eagle_config(name="eagle3-2step")
    experiment = make_experiment(name="nightly <b>", candidates=[candidate], profile=make_profile(concurrency=[1]))
    _measured(experiment, {experiment.baseline.name: 80.0, "eagle3-2step": 96.0})

    listing = cli("status")
    one = cli("status", str(experiment.pk))
    as_json = json.loads(cli("status", "--json").out)

    assert listing.code == 0 and "nightly <b>" in listing.out and "finished" in listing.out
    assert "eagle3-2step c=1 1.200x faster" in listing.out
    assert as_json["experiments"][0]["id"] == experiment.pk and as_json["experiments"][0]["best"]["verdict"] == "faster"
    assert one.code == 0 and f"{IN_PROCESS_URL}/experiments/{experiment.pk}/" in one.out
    # The speedup and interval as the pages write them (the row's `said`), and the accept length.
    assert "eagle3-2step  1" in one.out and "1.20x [1.13, 1.28]" in one.out and "2.50" in one.out
    assert "faster" in one.out


def test_the_experiment_json_carries_the_headline_and_accept_length_with_its_reference(client, owner):
    host, candidate, profile = make_host(), make_eagle_config(name="eagle3-2step"), make_profile(concurrency=[1])
    before = make_experiment(host=host, candidates=[candidate], profile=profile)
    _measured(before, {before.baseline.name: 80.0, "eagle3-2step": 96.0}, accept=2.5)
    now = make_experiment(host=host, baseline=before.baseline, candidates=[candidate], profile=profile)
    _measured(now, {before.baseline.name: 80.0, "eagle3-2step": 90.0}, accept=2.4)
    _, token = ApiToken.issue(owner)

    body = client.get(f"/api/experiments/{now.pk}", headers={"Authorization": f"Bearer {token}"}).json()

    assert body["headline"].startswith("eagle3-2step serves 1.12x")
    [cell] = body["accept_length"]["eagle3-2step"]
    assert cell["concurrency"] == 1 and cell["mean"] == pytest.approx(2.4)
    assert cell["reference"] == {"mean": pytest.approx(2.5), "run": cell["reference"]["run"], "experiment": before.pk}
    assert body["comparison"][0]["speed_verdict"] == "faster"
    # The first of its series has nothing to compare with.
    first = client.get(f"/api/experiments/{before.pk}", headers={"Authorization": f"Bearer {token}"}).json()
    assert first["accept_length"]["eagle3-2step"][0]["reference"] is None


def test_runs_filters_by_experiment_and_state_and_refuses_an_unknown_state(cli, logged_in):
    experiment = make_experiment()
    other = make_experiment()
    first = experiment.run_set.order_by("sequence")[0]
    Run.objects.filter(pk=first.pk).update(state=Run.State.LOADING)

    result = cli("runs", "--experiment", str(experiment.pk), "--json")
    loading = cli("runs", "--state", "loading", "--json")
    Run.objects.filter(experiment=other).update(state=Run.State.FAILED)
    active = cli("runs", "--state", "active", "--json")
    bad = cli("runs", "--state", "dancing")

    assert result.code == 0
    assert {r["id"] for r in json.loads(result.out)} == set(experiment.run_set.values_list("pk", flat=True))
    assert [r["id"] for r in json.loads(loading.out)] == [first.pk]
    assert {r["id"] for r in json.loads(active.out)} == set(experiment.run_set.values_list("pk", flat=True))
    assert bad.code == 2 and "state: One of active" in bad.err
    text = cli("runs").out
    assert text.splitlines()[0].split() == ["run", "experiment", "config", "host", "launch", "state", "failure",
                                            "started"]  # fmt: skip


def test_a_launch_is_counted_from_1_as_on_the_pages_and_the_json_keeps_its_index(cli, logged_in, client, owner):
    experiment = make_experiment(profile=make_profile(launches=2))
    second = experiment.run_set.get(launch_index=1, config=experiment.baseline)

    listed = next(line.split() for line in cli("runs").out.splitlines() if line.startswith(f"{second.pk} "))
    summary = next(line.split() for line in cli("status", str(experiment.pk)).out.splitlines()
                   if line.startswith(f"{second.pk} "))  # fmt: skip
    as_json = next(r for r in json.loads(cli("runs", "--json").out) if r["id"] == second.pk)
    client.force_login(owner)
    page = client.get(second.get_absolute_url()).content.decode()

    assert "launch 2" in page
    assert listed[4] == "2" and summary[2] == "2"
    assert as_json["launch_index"] == 1


def test_cancel_says_whether_it_was_accepted(cli, logged_in):
    experiment = make_experiment()
    queued, done = experiment.run_set.order_by("sequence")
    Run.objects.filter(pk=done.pk).update(state=Run.State.SUCCEEDED)

    accepted = cli("cancel", str(queued.pk))
    refused = cli("cancel", str(done.pk))

    assert accepted.code == 0 and "cancel" in accepted.out
    assert refused.code == 2 and "already ended" in refused.err
    queued.refresh_from_db()
    assert queued.state == Run.State.CANCELLED or queued.cancel_requested


def test_a_viewer_is_refused_with_the_servers_reason(cli, cli_home, viewer):
    _, token = ApiToken.issue(viewer)
    credentials.save(IN_PROCESS_URL, token)
    run = make_experiment().run_set.all()[0]

    result = cli("cancel", str(run.pk))

    assert result.code == 2
    assert "403" in result.err and "Your role does not allow this" in result.err


def test_export_writes_csv_and_json(cli, logged_in, tmp_path):
    candidate = make_eagle_config(name="eagle3-2step")
    experiment = make_experiment(candidates=[candidate], profile=make_profile(concurrency=[1]))
    _measured(experiment, {experiment.baseline.name: 80.0, "eagle3-2step": 96.0})

    as_csv = cli("export", str(experiment.pk), "--format", "csv")
    written = cli("export", str(experiment.pk), "--format", "json", "-o", str(tmp_path / "e.json"))

    rows = list(csv.DictReader(io.StringIO(as_csv.out)))
    assert as_csv.code == 0 and rows[0]["candidate"] == "eagle3-2step" and rows[0]["verdict"] == "faster"
    assert written.code == 0
    exported = json.loads((tmp_path / "e.json").read_text())
    assert exported["experiment"]["id"] == experiment.pk and exported["comparison"][0]["speedup"] == pytest.approx(1.2)


def test_logs_prints_a_runs_log_from_a_line_and_follows_a_finished_run_to_its_end(cli, logged_in):
    run = make_run(state=Run.State.SUCCEEDED)
    make_log(run, [["loading", "ready \x1b[31mred\x1b[0m"], ["serving", "done"]])

    everything = cli("logs", str(run.pk), "-f", "--poll", "0")
    after = cli("logs", str(run.pk), "--after", "2", "-n")
    as_json = cli("logs", str(run.pk), "--grep", "SERV", "--json")

    assert everything.code == 0
    # A log line's escape sequences reach the terminal escaped, not as colours.
    assert everything.out.splitlines() == ["loading", "ready \\x1b[31mred\\x1b[0m", "serving", "done"]
    assert [line.split() for line in after.out.splitlines()] == [["3", "serving"], ["4", "done"]]
    assert [json.loads(line) for line in as_json.out.splitlines()] == [{"n": 3, "text": "serving"}]


def test_submit_sends_a_yaml_file_and_prints_the_runs(cli, logged_in, tmp_path):
    host = make_host(name="gpu-1")
    path = tmp_path / "experiment.yaml"
    path.write_text(yaml.safe_dump(experiment_payload(host)))

    result = cli("submit", str(path))

    assert result.code == 0, result.err
    experiment = Experiment.objects.get()
    assert f"Experiment {experiment.pk} submitted: {IN_PROCESS_URL}/experiments/{experiment.pk}/" in result.out
    assert "eagle3-2step: queued" in result.out


def test_submit_reads_json_and_names_the_fields_a_422_refuses(cli, logged_in, tmp_path):
    payload = experiment_payload(make_host())
    payload["candidates"][0]["speculative_num_steps"] = 99
    path = tmp_path / "experiment.json"
    path.write_text(json.dumps(payload))

    result = cli("submit", str(path))

    assert result.code == 2
    assert "invalid experiment (422)" in result.err and "candidates.0.speculative_num_steps" in result.err
    assert not Experiment.objects.exists()


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("e.yaml", "- just\n- a list\n", "an experiment is a mapping"),
        ("e.yaml", "name: [unclosed\n", "not valid YAML"),
        ("e.json", "{'single': 'quotes'}", "not valid JSON"),
        ("e.yaml", "!!python/object/apply:os.system ['true']\n", "not valid YAML"),
    ],
)
def test_submit_refuses_a_file_that_is_no_experiment_before_sending_it(
    cli, logged_in, tmp_path, name, content, message
):
    (tmp_path / name).write_text(content)

    result = cli("submit", str(tmp_path / name))

    assert result.code == 2 and message in result.err
