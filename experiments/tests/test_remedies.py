"""Remedies of failed runs: what each failure's evidence suggests (pure, against the real failure logs of the corpus
and table cases), and re-running a failed run's config with one as a new, linked config version."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from experiments.actions.audit import Actor
from experiments.actions.runs import do_rerun_with_remedy
from experiments.formats.run_facts import server_facts
from experiments.forms.remedies import remedied_config
from experiments.models import AuditEvent, Run, ServerConfig
from experiments.remedies import Evidence, Link, Remedy, RemedyRefused, remedies_for, server_args_in
from experiments.rules import launch_policy, model_checks
from experiments.rules.config_names import remedy_name
from experiments.rules.launch_fields import SGLANG, managed_flags

from .factories import make_config, make_eagle_config, make_experiment, make_measurement, make_profile

# The failure logs the worker's failure finder is tested on (read as text: the domain does not import the workers).
CORPUS = Path(__file__).resolve().parents[2] / "workers" / "tests" / "corpus"
EAGLE: dict[str, Any] = {
    "model_path": "/models/kimi-k2.5-sim",
    "speculative_algorithm": "EAGLE3",
    "speculative_draft_model_path": "/models/kimi-k2.5-sim-eagle3",
    "speculative_num_steps": 2,
    "speculative_eagle_topk": 1,
    "speculative_num_draft_tokens": 3,
    "tp_size": 8,
    "extra_args": [],
    "env": {},
}


def _spec(**fields: Any) -> dict[str, Any]:
    return {**EAGLE, **fields}


def _corpus(name: str, **evidence: Any) -> Evidence:
    """A corpus log as the worker records its failure: the kind, what its message says (the corpus's `message:`, a
    part of the finder's message), the excerpt."""
    lines = (CORPUS / name).read_text(encoding="utf-8").split("\n")
    body = lines.index("# ---")
    headers = dict(line.removeprefix("# ").partition(": ")[::2] for line in reversed(lines[:body]))
    return Evidence(kind=headers["kind"], message=headers["message"], excerpt="\n".join(lines[body + 1 :]), **evidence)


def _by_id(remedies: list[Remedy]) -> dict[str, Remedy]:
    return {remedy.id: remedy for remedy in remedies}


def _applied(remedy: Remedy, spec: dict[str, Any]) -> dict[str, Any]:
    assert remedy.change is not None, remedy
    return remedy.change.apply(spec)


# ---- against the corpus -----------------------------------------------------------------------------------------


def test_it_caps_the_context_or_sets_the_override_for_sglangs_context_length_refusal():
    remedies = remedies_for(_corpus("context_length.log", request_tokens=256), _spec())

    assert [r.id for r in remedies] == ["context-length", "context-override", "matching-draft"]
    cap, override, draft = remedies
    assert "131072" in cap.explanation and "2048" in cap.explanation
    assert _applied(cap, _spec())["extra_args"] == ["--context-length", "2048"]
    assert _applied(override, _spec())["env"] == {"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"}
    assert "incorrect model outputs" in override.explanation  # SGLang's own warning about the override
    assert draft.change is None and draft.link == Link.COPY


def test_it_lowers_the_captured_batch_sizes_first_when_the_oom_hit_graph_capture():
    evidence = _corpus("capture_graph_oom.log", server_args={"mem_fraction_static": 0.88, "cuda_graph_max_bs": 160})

    remedies = remedies_for(evidence, _spec())

    assert [r.id for r in remedies] == ["cuda-graph-bs", "mem-fraction", "no-cuda-graph"]
    graphs, memory, no_graphs = remedies
    assert "448.00 MiB" in graphs.explanation and "SGLang chose 160" in graphs.explanation
    assert _applied(graphs, _spec())["extra_args"] == ["--cuda-graph-max-bs", "80"]
    assert _applied(memory, _spec())["extra_args"] == ["--mem-fraction-static", "0.83"]
    assert _applied(no_graphs, _spec())["extra_args"] == ["--disable-cuda-graph"]


def test_it_lowers_the_memory_fraction_first_and_passes_on_pytorchs_advice_for_an_oom_outside_capture():
    # PyTorch's text mentions "private pools (e.g., CUDA Graphs)": not a capture.
    evidence = _corpus("cuda_oom_during_load.log", server_args={"mem_fraction_static": 0.892})

    remedies = remedies_for(evidence, _spec())

    assert [r.id for r in remedies] == ["mem-fraction", "cuda-graph-bs", "expandable-segments"]
    memory, graphs, segments = remedies
    assert "24.00 MiB on GPU 1 (47.37 GiB) with 4.31 MiB free" in memory.explanation
    assert _applied(memory, _spec())["extra_args"] == ["--mem-fraction-static", "0.84"]
    assert graphs.change is None  # the server's batch sizes are not known, so no number is made up
    assert _applied(segments, _spec())["env"] == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}


@pytest.mark.parametrize(
    "log", ["capture_graph_illegal_memory_access.log", "capture_graph_illegal_memory_access_lone.log"]
)
def test_it_offers_no_cuda_graphs_for_a_capture_that_crashed(log):
    remedies = remedies_for(_corpus(log), _spec())

    assert [r.id for r in remedies] == ["no-cuda-graph"]
    assert "illegal memory access" in remedies[0].explanation
    assert _applied(remedies[0], _spec())["extra_args"] == ["--disable-cuda-graph"]


@pytest.mark.parametrize("log", ["multi_rank_value_error.log", "nccl_watchdog_timeout.log", "fatal_python_error.log"])
def test_it_offers_nothing_for_a_crash_it_has_no_remedy_for(log):
    assert remedies_for(_corpus(log), _spec()) == []


def test_it_says_host_memory_is_an_admins_for_the_oom_killer():
    [remedy] = remedies_for(_corpus("host_oom_killed.log", host_name="gpu-7"), _spec())

    assert remedy.id == "host-memory" and remedy.admin and remedy.link == Link.HOST and remedy.change is None
    assert "Killed" in remedy.explanation and "gpu-7" in remedy.title


# ---- table cases ------------------------------------------------------------------------------------------------

OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."


@pytest.mark.parametrize(
    ("extra_args", "after"),
    [
        (["--mem-fraction-static", "0.88"], ["--mem-fraction-static", "0.83"]),
        (["--mem-fraction-static=0.7", "--enable-metrics"], ["--enable-metrics", "--mem-fraction-static", "0.65"]),
        # argparse's prefix spelling is the same flag: replaced, not left to fight the new one
        (["--mem-fraction", "0.9", "--max-running-requests", "8"],
         ["--max-running-requests", "8", "--mem-fraction-static", "0.85"]),
    ],
)  # fmt: skip
def test_it_lowers_the_fraction_the_config_sets_by_one_step(extra_args, after):
    remedy = _by_id(
        remedies_for(Evidence("oom", OOM, server_args={"mem_fraction_static": 0.5}), _spec(extra_args=extra_args))
    )

    assert _applied(remedy["mem-fraction"], _spec(extra_args=extra_args))["extra_args"] == after
    assert "the config sets" in remedy["mem-fraction"].explanation


def test_it_advises_more_gpus_when_the_fraction_is_already_low():
    remedy = _by_id(remedies_for(Evidence("oom", OOM, server_args={"mem_fraction_static": 0.52}), _spec()))[
        "mem-fraction"
    ]

    assert remedy.change is None and remedy.link == Link.COPY and "higher tp" in remedy.explanation


def test_it_raises_the_fraction_when_sglang_says_the_kv_pool_got_too_little():
    message = (
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: "
        "self.server_args.mem_fraction_static=0.5"
    )

    [remedy] = remedies_for(Evidence("oom", message), _spec())

    assert remedy.title.endswith("--mem-fraction-static 0.55") and "SGLang reported 0.5" in remedy.explanation
    assert _applied(remedy, _spec())["extra_args"] == ["--mem-fraction-static", "0.55"]


def test_it_takes_sglangs_suggestions_when_the_servers_own_values_are_unknown():
    excerpt = (
        "Exception: Capture cuda graph failed: CUDA out of memory.\nPossible solutions:\n"
        "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
        "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)\n"
    )

    remedies = _by_id(remedies_for(Evidence("oom", "Capture cuda graph failed: CUDA out of memory", excerpt), _spec()))

    assert remedies["cuda-graph-bs"].change is not None and remedies["cuda-graph-bs"].change.args == {
        "--cuda-graph-max-bs": "16"
    }
    assert remedies["mem-fraction"].change is not None and remedies["mem-fraction"].change.args == {
        "--mem-fraction-static": "0.8"
    }


def test_it_uses_the_cuda_graph_flags_of_the_sglang_that_ran():
    server_args = {"cuda_graph_max_bs_decode": 512, "cuda_graph_backend_decode": "full", "mem_fraction_static": 0.9}
    evidence = Evidence("oom", "Capture cuda graph failed: CUDA out of memory", server_args=server_args)

    remedies = _by_id(remedies_for(evidence, _spec()))

    assert _applied(remedies["cuda-graph-bs"], _spec())["extra_args"] == ["--cuda-graph-max-bs-decode", "256"]
    assert _applied(remedies["no-cuda-graph"], _spec())["extra_args"] == ["--cuda-graph-backend-decode", "disabled"]


def test_it_does_not_offer_what_the_config_already_does():
    spec = _spec(extra_args=["--disable-cuda-graph"], env={"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "true"})

    assert remedies_for(Evidence("crashed", "Capture cuda graph failed: boom"), spec) == []
    context = Evidence("context_length", "context_length (131072) is greater than the derived context_length (2048)")
    assert "context-override" not in _by_id(remedies_for(context, spec))


def test_it_reads_the_preflights_context_length_refusal_too():
    problem = model_checks.context_length_problem(
        {"max_position_embeddings": 262144}, {"max_position_embeddings": 131072}, context_length=None, env={}
    )
    assert problem is not None

    remedies = _by_id(remedies_for(Evidence("preflight", problem), _spec()))

    assert _applied(remedies["context-length"], _spec())["extra_args"] == ["--context-length", "131072"]


def test_it_does_not_offer_a_context_cap_that_the_benchmarks_requests_exceed():
    evidence = Evidence(
        "context_length",
        "context_length (131072) is greater than the derived context_length (2048)",
        request_tokens=4096,
    )

    cap = _by_id(remedies_for(evidence, _spec()))["context-length"]

    assert cap.change is None and "4096 tokens" in cap.explanation


def test_it_names_the_processes_holding_gpu_memory_and_asks_an_admin_to_clean_a_dirty_host():
    evidence = Evidence(
        "teardown_incomplete",
        "GPU memory is still held after SIGKILL: pid 4242 still holds 81920 MiB, pid 4243 still holds 1024 MiB",
        host_name="gpu-3",
        host_dirty_reason="run 9: pid 4242 still holds 81920 MiB, pid 4243 still holds 1024 MiB",
    )

    [remedy] = remedies_for(evidence, _spec())

    assert remedy.id == "clean-host" and remedy.admin and remedy.link == Link.HOST and remedy.change is None
    assert "pid 4242 (81920 MiB), pid 4243 (1024 MiB) hold GPU memory on gpu-3" in remedy.explanation


def test_it_names_other_peoples_processes_that_kept_the_gpus_busy_at_preflight():
    message = "GPUs are busy: pid 77 holds 2048 MiB, pid 78 holds GPU memory (amount not reported). Stop those ..."

    [remedy] = remedies_for(Evidence("preflight", message, host_name="gpu-3"), _spec())

    assert (
        remedy.title == "Free the GPUs of gpu-3" and "pid 77 (2048 MiB), pid 78 hold GPU memory" in remedy.explanation
    )


def test_it_tells_a_slow_load_from_a_hung_one_for_a_zombie_and_lists_its_processes_on_a_dirty_host():
    message = "The server process lives but its log has not advanced and port 30000 has not answered for 301 s."
    facts = {"target_progress": 100, "draft_progress": 40}
    evidence = Evidence(
        "zombie", message, server_facts=facts, pids=(31, 32), stall_timeout_s=300, host_dirty_reason="run 4: stuck"
    )

    stall, clean = remedies_for(evidence, _spec())

    assert stall.id == "stall-timeout" and stall.link == Link.COPY and stall.change is None
    assert "target weights 100%, draft weights 40%" in stall.explanation and "(now 300 s)" in stall.explanation
    assert clean.id == "clean-host" and "pid 31, pid 32 hold GPU memory" in clean.explanation
    assert [r.id for r in remedies_for(Evidence("zombie", message, pids=(31,)), _spec())] == ["stall-timeout"]


def test_it_advises_a_longer_readiness_timeout_with_how_far_the_server_got():
    facts = {"target_progress": 100, "capture_progress": 60}
    evidence = Evidence("readiness_timeout", "The server was not ready after 1800 s.", server_facts=facts,
                        readiness_timeout_s=1800)  # fmt: skip

    [remedy] = remedies_for(evidence, _spec())

    assert "CUDA-graph capture 60%" in remedy.explanation and "(now 1800 s)" in remedy.explanation


def test_it_sends_an_admin_to_the_hosts_environment_when_variables_do_not_reach_the_processes():
    message = (
        "Environment variables did not reach every server process: NCCL_PROTO, NCCL_ALGO missing in pid 12 "
        "(sglang::scheduler_TP1)"
    )

    [remedy] = remedies_for(
        Evidence("env_not_propagated", message), _spec(env={"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring"})
    )

    assert remedy.admin and remedy.link == Link.HOST and remedy.change is None
    assert "export NCCL_PROTO=LL; export NCCL_ALGO=Ring" in remedy.explanation


def test_it_drops_the_extra_arguments_sglang_does_not_know():
    spec = _spec(extra_args=["--enable-foo", "--mem-fraction-static", "0.8"])
    message = "launch_server.py: error: unrecognized arguments: --enable-foo"

    [remedy] = remedies_for(Evidence("misconfigured", message), spec)

    assert _applied(remedy, spec)["extra_args"] == ["--mem-fraction-static", "0.8"]


def test_every_change_it_offers_passes_the_launch_policy():
    cases = [
        _corpus("context_length.log"),
        _corpus("capture_graph_oom.log", server_args={"mem_fraction_static": 0.88, "cuda_graph_max_bs_decode": 160}),
        _corpus("cuda_oom_during_load.log", server_args={"mem_fraction_static": 0.9, "cuda_graph_max_bs": 8}),
        _corpus("capture_graph_gloo.log"),
        # A flag the allowlist takes that this (era B) SGLang does not know yet.
        Evidence("misconfigured", "error: unrecognized arguments: --disable-decode-cuda-graph"),
    ]
    spec = _spec(extra_args=["--disable-decode-cuda-graph"])
    changes = [r for evidence in cases for r in remedies_for(evidence, spec) if r.change is not None]

    assert len(changes) >= 8
    for remedy in changes:
        assert launch_policy.launch_refusals(_applied(remedy, spec), (), managed_flags(SGLANG)) == [], remedy.id


def test_it_reads_the_server_args_of_either_eras_log_line():
    era_b = (
        "[2026-02-23 10:00:00] server_args=ServerArgs(model_path='/m', mem_fraction_static=0.88, "
        "cuda_graph_max_bs=160, disable_cuda_graph_padding=True, disable_cuda_graph=False, context_length=None)"
    )
    era_c = (
        "server_args={'mem_fraction_static': 0.892, 'cuda_graph_max_bs_decode': 512, "
        "'cuda_graph_backend_decode': 'full'}"
    )

    assert server_args_in(era_b) == {
        "mem_fraction_static": 0.88, "cuda_graph_max_bs": 160, "disable_cuda_graph": False, "context_length": None
    }  # fmt: skip
    assert server_args_in(era_c) == {
        "mem_fraction_static": 0.892, "cuda_graph_max_bs_decode": 512, "cuda_graph_backend_decode": "full"
    }  # fmt: skip


@pytest.mark.parametrize(
    ("name", "label", "expected"),
    [
        ("eagle3-2step", "mem 0.83", "eagle3-2step · mem 0.83"),
        ("eagle3-2step · mem 0.83", "mem 0.78", "eagle3-2step · mem 0.78"),
        ("eagle3-2step · ctx 2048", "mem 0.83", "eagle3-2step · ctx 2048 · mem 0.83"),
        ("x" * 128, "graph bs 80", "x" * 114 + " · graph bs 80"),
    ],
)
def test_it_names_a_new_version_after_its_remedy(name, label, expected):
    assert remedy_name(name, label, 128) == expected


def test_it_shapes_the_servers_facts_for_the_run_page():
    live = {
        "server": {
            "draft_loading_progress": 40,
            "capture_progress": 50,
            "graphs_captured": [["target", 18.28], ["target", 17.9], ["draft", 4.56]],
            "limits": {"max_total_num_tokens": 600000, "max_running_requests": 48, "context_len": 131072},
            "retractions": 2,
            "last_retraction": "KV cache pool is full. Retract requests. #retracted_reqs: 3",
        }
    }

    facts = server_facts(live, 100)

    assert facts["capture_s"] == {"target": 18.28, "draft": 4.56}  # every rank logs it: the longest counts
    assert facts["shown"] == {
        "target_progress": "100%", "draft_progress": "40%", "capture": "target 18.3 s · draft 4.6 s · capturing 50%",
        "max_total_num_tokens": "600,000 tokens", "max_running_requests": "48", "context_len": "131,072 tokens",
        "retractions": "2",
    }  # fmt: skip
    assert server_facts({}, None)["shown"]["capture"] == "—"


# ---- re-running with a remedy -----------------------------------------------------------------------------------


def _rerun(run: Run, remedy_id: str, actor: Actor) -> tuple[ServerConfig, list[Run]]:
    """As the run page and the API re-run one: the remedy's config validated by its form, then the action."""
    remedy, version = remedied_config(run, remedy_id)
    return do_rerun_with_remedy(run, remedy, version, actor)


SERVER_ARGS = {"mem_fraction_static": 0.88, "cuda_graph_max_bs": 160}


def _failed(config: ServerConfig, experiment, **fields: Any) -> Run:
    run = experiment.run_set.filter(config=config).order_by("sequence")[0]
    fields = {"state": Run.State.FAILED, "failure_kind": Run.FailureKind.OOM, "failure_message": OOM,
              "effective_args": SERVER_ARGS, **fields}  # fmt: skip
    Run.objects.filter(pk=run.pk).update(**fields)
    run.refresh_from_db()
    return run


@pytest.mark.django_db
def test_it_rerun_a_failed_candidate_as_a_new_version_in_its_place_beside_the_baseline(owner):
    candidate = make_eagle_config(name="eagle3-2step", extra_args=["--enable-metrics"])
    experiment = make_experiment(candidates=[candidate], profile=make_profile(launches=2), created_by=owner)
    failed = _failed(candidate, experiment)
    last = experiment.run_set.order_by("-sequence")[0]

    config, runs = _rerun(failed, "mem-fraction", Actor(owner))

    assert config.name == "eagle3-2step · mem 0.83"
    assert config.extra_args == ["--enable-metrics", "--mem-fraction-static", "0.83"]
    assert (config.derived_from, config.remedy_for_run, config.created_by) == (candidate, failed, owner)
    assert experiment.ordered_candidates() == [config]  # it never measured: the new version takes its place
    assert [(r.config, r.state) for r in runs] == [
        (experiment.baseline, "queued"), (config, "queued"), (experiment.baseline, "queued"), (config, "queued")
    ]  # fmt: skip
    assert [r.sequence for r in runs] == list(range(last.sequence + 1, last.sequence + 5))
    # its second launch, still queued, would repeat the failure: cancelled
    assert set(experiment.run_set.filter(config=candidate).values_list("state", flat=True)) == {"failed", "cancelled"}
    assert {r.launch_index for r in runs} == {last.launch_index + 1, last.launch_index + 2}
    event = AuditEvent.objects.about(failed).get(action=AuditEvent.Action.REMEDY)
    assert event.detail["config"] == config.pk and event.detail["runs"] == [r.pk for r in runs]


@pytest.mark.django_db
def test_it_keeps_a_candidate_that_measured_and_adds_the_new_version_beside_it(owner):
    candidate = make_eagle_config(name="eagle3-2step")
    experiment = make_experiment(candidates=[candidate], profile=make_profile(launches=2))
    measured, failing = experiment.run_set.filter(config=candidate).order_by("sequence")
    Run.objects.filter(pk=measured.pk).update(state=Run.State.SUCCEEDED)
    make_measurement(measured, concurrency=1, output_throughput=90.0)
    Run.objects.filter(pk=failing.pk).update(state=Run.State.FAILED, failure_kind="oom", failure_message=OOM,
                                             effective_args=SERVER_ARGS)  # fmt: skip

    config, _ = _rerun(Run.objects.get(pk=failing.pk), "mem-fraction", Actor(owner))

    assert experiment.ordered_candidates() == [candidate, config]
    assert not experiment.run_set.filter(state=Run.State.CANCELLED).exists()


@pytest.mark.django_db
def test_it_makes_the_new_version_of_a_failed_baseline_the_baseline_and_measures_every_candidate_beside_it(owner):
    experiment = make_experiment(candidates=[make_eagle_config(name="a"), make_eagle_config(name="b")])
    old = experiment.baseline
    failed = _failed(old, experiment)

    config, runs = _rerun(failed, "cuda-graph-bs", Actor(owner))

    experiment.refresh_from_db()
    assert experiment.baseline == config and config.extra_args == ["--cuda-graph-max-bs", "80"]
    assert [r.config.name for r in runs] == [config.name, "a", "b"]


@pytest.mark.django_db
def test_it_refuses_a_remedy_twice_advice_and_an_unknown_one(owner):
    candidate = make_eagle_config(name="eagle3")
    experiment = make_experiment(candidates=[candidate])
    failed = _failed(candidate, experiment, failure_kind=Run.FailureKind.ZOMBIE, failure_message="quiet for 301 s.")
    oom = _failed(experiment.baseline, experiment)
    _rerun(oom, "mem-fraction", Actor(owner))

    for run, remedy_id, words in [
        (oom, "mem-fraction", "is no longer compared"),  # the new version took the baseline's place
        (failed, "stall-timeout", "is advice"),
        (failed, "<script>", "has no remedy"),
    ]:
        with pytest.raises(RemedyRefused, match=words):
            _rerun(run, remedy_id, Actor(owner))
    assert ServerConfig.objects.filter(remedy_for_run__isnull=False).count() == 1


@pytest.mark.django_db
def test_it_refuses_the_same_version_twice(owner):
    candidate = make_eagle_config(name="eagle3")
    experiment = make_experiment(candidates=[candidate], profile=make_profile(launches=2))
    first, second = experiment.run_set.filter(config=candidate).order_by("sequence")
    for run in (first, second):
        Run.objects.filter(pk=run.pk).update(state="failed", failure_kind="oom", failure_message=OOM,
                                             effective_args=SERVER_ARGS)  # fmt: skip
    Run.objects.filter(pk=first.pk).update(state=Run.State.SUCCEEDED)  # measured once: the old one stays compared
    _rerun(Run.objects.get(pk=second.pk), "mem-fraction", Actor(owner))

    with pytest.raises(RemedyRefused, match="already runs this config"):
        _rerun(Run.objects.get(pk=second.pk), "mem-fraction", Actor(owner))


@pytest.mark.django_db
def test_it_holds_the_new_version_to_the_rules_of_a_hand_made_config(owner):
    # Stored around the form (before a rule existed): the copy must not launch what the form refuses now.
    candidate = make_config(name="old", extra_args=["--config", "/etc/x.yaml"])
    experiment = make_experiment(candidates=[candidate])
    failed = _failed(candidate, experiment)

    with pytest.raises(RemedyRefused) as refused:
        _rerun(failed, "mem-fraction", Actor(owner))

    assert "--config is never settable" in " ".join(refused.value.errors["extra_args"])
    assert not ServerConfig.objects.filter(derived_from=candidate).exists()
