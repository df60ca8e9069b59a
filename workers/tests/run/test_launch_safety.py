"""No value of a config or profile field that passes the forms can run a command on the host or give the server a
variable outside the allowlist: property tests through the real sshd.

The values go through the real forms, then the real command builders (`server.launch_command`, started by
`server.start` in a work directory resolved by `hosts.work_dir`, and `benchmark.command`), then a real SSH session
and shell. The host's launcher (and its Python) is a probe that prints the argv and the environment it received.
Every generated value carries shell syntax that would create a canary file if anything ever evaluated it.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import shutil
import sys
import time
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from experiments.forms import (
    BenchmarkProfileForm,
    ServerConfigForm,
    apply_profile_defaults,
    config_form_data,
    profile_form_data,
)
from experiments.models import Host, ServerConfig
from experiments.rules import secrets
from experiments.rules.launch_env import ENV_RULES
from experiments.rules.launch_policy import env_name_refusal
from workers import hosts
from workers.run import benchmark, server
from workers.ssh import HostConnection, quote_command

pytestmark = pytest.mark.integration

PROBE = f"{shlex.quote(sys.executable)} -c " + shlex.quote(
    "import json, os, sys; print(json.dumps({'argv': sys.argv[1:], 'env': dict(os.environ)}))"
)
CANARY_DIR = Path("/tmp") / f"specdash-canary-{uuid.uuid4().hex[:8]}"
CANARY = CANARY_DIR / "CANARY"
EXTRA_PREFIXES = ["SIMHOST_"]

# Shell syntax in every position a value can take; none of it may ever run.
DANGER = st.sampled_from(
    [
        f"$(touch {CANARY})",
        f"`touch {CANARY}`",
        f"; touch {CANARY}",
        f"&& touch {CANARY}",
        f"| touch {CANARY}",
        f"' ; touch {CANARY} ; '",
        f'" ; touch {CANARY} ; "',
        f"\t> {CANARY}",
        " LD_PRELOAD=/tmp/evil.so",
        "PYTHONWARNINGS=ignore::evil.Mod",
        "\\",
        "$HOME ~ * ? [a] {a,b} ! # %",
    ]
)
# What the forms let through: any text but control characters (tab aside) and line or paragraph separators.
PLAIN = st.text(
    alphabet=st.characters(
        codec="utf-8",
        exclude_characters="".join(chr(c) for c in (*range(0, 9), *range(10, 32), *range(127, 160), 0x2028, 0x2029)),
    ),
    max_size=12,
)
WORD = st.one_of(PLAIN, st.builds(lambda a, d, b: a + d + b, PLAIN, DANGER, PLAIN))
# A model directory's name under the models root: any such text as one path component.
MODEL_NAME = st.builds(lambda w: "m" + w.replace("/", "_"), WORD)
# Variables whose values are free text: the host's extra prefix (its admin's knobs) and the token. The listed
# tuning variables take only the values of their rules, so they get valid ones.
FREE_ENV_NAME = st.one_of(st.from_regex(r"SIMHOST_[A-Z0-9_]{1,10}", fullmatch=True), st.just("HF_TOKEN")).filter(
    lambda name: env_name_refusal(name, EXTRA_PREFIXES) is None
)
LISTED_ENV = st.sampled_from(
    [
        ("NCCL_PROTO", "LL,Simple"),
        ("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", "1"),
        ("EAGLE3_PROFILE", "1"),
        ("CUDA_VISIBLE_DEVICES", "0,1"),
        ("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"),
    ]
)
LISTED_ENVS = st.lists(LISTED_ENV, max_size=2)
EXTRA_ARGS: st.SearchStrategy[list[str]] = st.one_of(
    st.just([]),
    st.builds(lambda v: ["--mem-fraction-static", f"{v:.2f}"], st.floats(0.05, 0.99)),
    st.just(["--context-length", "8", "--reasoning-parser", "qwen3"]),
    st.just(["--enable-metrics", "--cuda-graph-max-bs=8", "--attention-backend", "fa3"]),
)


@st.composite
def configs(draw) -> dict:
    """A JSON API config (the shape both the API and the demo submit) whose values the forms accept."""
    payload = {
        "name": "n" + draw(WORD),
        "model_path": "/models/" + draw(MODEL_NAME),
        "served_model_name": draw(st.one_of(st.just(""), st.builds(lambda w: "m" + w, WORD))),
        "tp_size": draw(st.integers(1, 64)),
        "env": {**draw(st.dictionaries(FREE_ENV_NAME, WORD, max_size=3)), **dict(draw(LISTED_ENVS))},
        "extra_args": draw(EXTRA_ARGS),
    }
    if draw(st.booleans()):
        steps, topk = draw(st.integers(1, 16)), draw(st.integers(1, 64))
        draft = steps + 1 if topk == 1 else draw(st.integers(1, 256))
        payload.update(
            speculative_algorithm="EAGLE3",
            speculative_draft_model_path="/models/" + draw(MODEL_NAME),
            speculative_num_steps=steps,
            speculative_eagle_topk=topk,
            speculative_num_draft_tokens=draft,
        )
    return payload


def _expected_argv(config, port: int) -> list[str]:
    """The launch flags, spelled out here rather than by the code under test."""
    argv = ["--model-path", config.model_path]
    if config.served_model_name:
        argv += ["--served-model-name", config.served_model_name]
    argv += ["--tp-size", str(config.tp_size), "--host", "127.0.0.1", "--port", str(port)]
    if config.speculative_algorithm:
        argv += ["--speculative-algorithm", config.speculative_algorithm]
        argv += ["--speculative-draft-model-path", config.speculative_draft_model_path]
        for field in ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens"):
            argv += [f"--{field.replace('_', '-')}", str(getattr(config, field))]
    argv += list(config.extra_args)
    # The benchmark reads the server's /metrics: the launch enables them when the config does not.
    return argv if "--enable-metrics" in argv else [*argv, "--enable-metrics"]


class Remote:
    """One SSH connection to the test sshd, driven from synchronous hypothesis tests."""

    def __init__(self, sshd) -> None:
        self.loop = asyncio.new_event_loop()
        access = sshd.access()
        self.access = access
        self.conn = self.loop.run_until_complete(HostConnection.open(access))

    def __call__(self, coroutine):
        return self.loop.run_until_complete(coroutine)

    def probe_output(self, log_path: str, timeout: float = 15) -> dict:
        """The probe's JSON line, once the detached probe has written it to its log."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self(self.conn.run(quote_command(["cat", "--", log_path]))).stdout
            if text.endswith("\n"):
                return json.loads(text.splitlines()[-1])
            time.sleep(0.05)
        raise AssertionError(f"the probe wrote nothing to {log_path}")

    def launch(self, host: Host, config) -> dict:
        """What the probe received from `config`'s launch command, run in the foreground (one round trip)."""
        command = f"{server.EXPORT_FROM_STDIN}; {server.launch_command(host, config)}"
        result = self(self.conn.run(command, input=server.secrets_input(server.launch_secrets(host, config))))
        assert result.ok, result.stderr
        return json.loads(result.stdout)

    def start(self, host: Host, config) -> dict:
        """The same, started the way a run starts its server: detached, in the host's work directory, to a log."""
        work_dir = self(hosts.work_dir(self.conn, host))
        log_path = f"{work_dir}/runs/run-{uuid.uuid4().hex[:8]}.log"
        command, given = server.launch_command(host, config), server.launch_secrets(host, config)
        started = self(server.start(self.conn, work_dir, command, log_path, given))
        assert not isinstance(started, str), started
        return self.probe_output(log_path)


@pytest.fixture(scope="module")
def remote(sshd):
    CANARY_DIR.mkdir(exist_ok=True)
    remote = Remote(sshd)
    yield remote
    remote(remote.conn.close())
    remote.loop.close()
    shutil.rmtree(CANARY_DIR, ignore_errors=True)


@pytest.fixture(scope="module")
def probe_host():
    return Host(
        name="probe",
        launcher=PROBE,
        python=PROBE,
        models_root="/models",
        server_port=31000,
        extra_env_prefixes=EXTRA_PREFIXES,
    )


@pytest.fixture(scope="module")
def session_env(remote, probe_host) -> set[str]:
    """The names the SSH session and the shell provide to any command (the probe with no config environment)."""
    plain = ServerConfigForm(config_form_data({"name": "plain", "model_path": "/models/m"}))
    assert plain.is_valid(), plain.errors
    return set(remote.launch(probe_host, plain.built_config())["env"]) - {"PYTHONUNBUFFERED"}


def _valid_config(payload: dict, extra_prefixes: list[str]):
    form = ServerConfigForm(config_form_data(payload))
    form.extra_env_prefixes = tuple(extra_prefixes)
    assert form.is_valid(), form.errors
    return form.built_config()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payload=configs())
def test_it_launches_any_accepted_config_as_exactly_its_argv_and_allowed_env(remote, probe_host, session_env, payload):
    config = _valid_config(payload, EXTRA_PREFIXES)

    seen = remote.launch(probe_host, config)

    assert not CANARY.exists(), f"a value ran a command: {payload}"
    assert seen["argv"] == _expected_argv(config, probe_host.server_port)
    added = set(seen["env"]) - session_env
    assert added == {"PYTHONUNBUFFERED", *config.env}
    assert all(env_name_refusal(name, EXTRA_PREFIXES) is None for name in config.env)
    assert {name: seen["env"][name] for name in config.env} == secrets.revealed(config.env)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payload=configs(), work_dir=WORD)
def test_it_starts_a_server_detached_in_any_work_dir_with_the_same_argv(remote, payload, work_dir, tmp_path):
    config = _valid_config(payload, EXTRA_PREFIXES)
    # The work directory is the host's (admin-set); whatever its name, it stays one literal word.
    host = Host(
        name="probe",
        work_dir=str(tmp_path / ("w" + work_dir.replace("/", "_"))),
        launcher=PROBE,
        models_root="/models",
        server_port=31001,
        extra_env_prefixes=EXTRA_PREFIXES,
    )

    seen = remote.start(host, config)

    assert not CANARY.exists()
    assert seen["argv"] == _expected_argv(config, host.server_port)
    assert {name: seen["env"][name] for name in config.env} == secrets.revealed(config.env)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    profile=st.fixed_dictionaries(
        {
            "concurrency": st.lists(st.integers(1, 4096), min_size=1, max_size=4),
            # At most 4 levels x 3 passes (the default) x 16,000 prompts: under the 200,000 requests a launch may
            # hold (forms/profiles.py), so every drawn profile is one the form accepts.
            "num_prompts": st.integers(4096, 16_000),
            "input_len": st.integers(1, 2**20),
            "output_len": st.integers(2, 2**20),
            "seed": st.integers(-(2**31), 2**31 - 1),
            "warmup_requests": st.integers(0, 100),
            "request_timeout_s": st.integers(1, 86_400),
            "temperature": st.floats(0, 2),
            "top_p": st.floats(0, 1, exclude_min=True),
        }
    ),
    python_dir=WORD,
)
def test_it_benchmarks_any_accepted_profile_with_exactly_its_argv(remote, probe_host, profile, python_dir, tmp_path):
    form = BenchmarkProfileForm(profile_form_data(apply_profile_defaults(profile)))
    assert form.is_valid(), form.errors
    saved = form.save_unsaved(name="p")
    # The work directory is the host's (admin-set); any name must still be one literal word.
    work_dir = str(tmp_path / ("w" + python_dir.replace("/", "_")))
    Path(benchmark.client_dir(work_dir)).mkdir(parents=True, exist_ok=True)
    concurrency = saved.concurrency[-1]

    result = remote(remote.conn.run(benchmark.command(probe_host, saved, concurrency, work_dir)))

    assert not CANARY.exists()
    assert result.ok, result.stderr
    assert json.loads(result.stdout)["argv"] == [
        "-m",
        "benchclient",
        "--base-url",
        f"http://127.0.0.1:{probe_host.server_port}",
        "--concurrency",
        str(concurrency),
        "--num-prompts",
        str(saved.num_prompts),
        "--input-len",
        str(saved.input_len),
        "--output-len",
        str(saved.output_len),
        "--seed",
        str(saved.seed),
        "--warmup-requests",
        str(saved.warmup_requests),
        "--request-timeout",
        str(saved.request_timeout_s),
        "--temperature",
        repr(saved.temperature),
        "--top-p",
        repr(saved.top_p),
        "--metrics-interval-ms",
        "250",
        "--stream-metrics",
    ]


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(models_root=WORD)
def test_it_lists_the_models_under_any_models_root_as_one_literal_path(remote, models_root, tmp_path):
    root = tmp_path / ("m" + models_root.replace("/", "_"))
    (root / "model a").mkdir(parents=True, exist_ok=True)
    (root / "model a" / "config.json").write_text('{"vocab_size": 7}')

    listed = remote(hosts._list_host(Host(name="probe", models_root=str(root)), remote.access)).models

    assert not CANARY.exists()
    assert [(m["path"], m["vocab_size"]) for m in listed] == [(str(root / "model a"), 7)]


@settings(max_examples=40, deadline=None)
@given(
    name=st.one_of(
        st.sampled_from(["LD_PRELOAD", "PYTHONWARNINGS", "PERL5OPT", "BROWSER", "BASH_ENV", "PATH", "NCCL_NET_PLUGIN"]),
        st.from_regex(r"(LD_|PYTHON|PERL|BASH_|[A-Z]{2,8}_)[A-Z0-9_]{0,10}", fullmatch=True),
    ),
    value=WORD,
)
def test_it_never_accepts_a_variable_outside_the_allowlist(name, value):
    assume(name not in ENV_RULES)
    form = ServerConfigForm(config_form_data({"name": "c", "model_path": "/m", "env": {name: value}}))
    form.extra_env_prefixes = tuple(EXTRA_PREFIXES)

    accepted = form.is_valid()

    assert accepted == (env_name_refusal(name, EXTRA_PREFIXES) is None)
    if accepted:
        assert name.startswith("SIMHOST_")  # the host's extra prefix, and nothing else
    with pytest.raises(ValueError, match=name):  # the worker refuses it too, on a host without that prefix
        server.launch_command(
            Host(name="plain", models_root="/models"), ServerConfig(name="c", model_path="/models/m", env={name: value})
        )
