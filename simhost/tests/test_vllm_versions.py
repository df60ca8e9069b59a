"""The vLLM personality's pure rules per version: flags, --speculative-config validation, line formats, the
Prometheus exposition (no processes)."""

from __future__ import annotations

import json
import re

import pytest

from simhost import hostsetup, speed
from simhost.vllm import args as vargs
from simhost.vllm import lines, metrics, tracebacks, versions
from simhost.vllm.engine import engine_args
from simhost.vllm.versions import VllmVersion

from .conftest import DRAFT, DRAFT_131K, TARGET

V092, V0102, V011, V033 = (VllmVersion.parse(v) for v in ("0.9.2", "0.10.2", "0.11.0", "0.33.0"))
H200_MIB = 143771


def eagle3(k: int = 3, **extra: object) -> list[str]:
    return [
        "--speculative-config",
        json.dumps({"method": "eagle3", "model": DRAFT, "num_speculative_tokens": k, **extra}),
    ]


def test_versions_default_newest_and_unknown() -> None:
    assert versions.current({}).text == "0.11.0" == versions.DEFAULT
    assert versions.NEWEST == "0.33.0"
    assert versions.current({"SIMHOST_VLLM_VERSION": "v0.9.2"}).era == "A"
    assert [VllmVersion.parse(v).era for v in ("0.10.1", "0.10.2", "0.17.1", "0.23.0", "0.33.0")] == list("BCCDE")
    with pytest.raises(versions.UnknownVersion, match=r"SIMHOST_VLLM_VERSION='0\.12\.0' is not a simulated vLLM"):
        VllmVersion.parse("0.12.0")


def test_model_positional_and_the_model_option_per_version() -> None:
    a = vargs.parse([TARGET, "-tp", "8", "--port", "9000", "--served-model-name", "kimi", "--trust-remote-code"], V011)
    assert (a.model, a.tp, a.port, a.served_model_name, a.host) == (TARGET, 8, 9000, "kimi", None)
    assert a.non_default["model_tag"] == TARGET and a.non_default["tensor_parallel_size"] == 8
    with pytest.raises(vargs.ConfigError, match=r"With `vllm serve`, you should provide the model as a positional"):
        vargs.parse(["--model", TARGET], V011)
    warned = vargs.parse(["--model", TARGET], V033)
    assert warned.model == TARGET
    assert warned.warnings[0][1].endswith("The `--model` option will be removed in a future version.")
    assert vargs.parse(["--model", TARGET], VllmVersion.parse("0.13.0")).warnings[0][1].endswith("in v0.13.")


@pytest.mark.parametrize(
    ("ver", "argv"),
    [
        (V011, ["--foo"]),
        (V011, ["--spec-tokens", "3"]),  # 0.23+
        (V033, ["--disable-log-requests"]),  # gone in 0.17
        (V092, ["--speculative-model", DRAFT]),  # removed in 0.8.3
    ],
)
def test_unknown_flags_are_argparse_errors(ver: VllmVersion, argv: list[str]) -> None:
    with pytest.raises(vargs.UsageError) as raised:
        vargs.parse([TARGET, *argv], ver)
    assert raised.value.text.startswith("usage: vllm ")
    assert re.search(r"^vllm: error: unrecognized arguments: --[\w-]+", raised.value.text, re.M)


def test_flexible_spellings_dotted_form_and_shorthands() -> None:
    dotted = vargs.parse(
        [
            TARGET,
            "--speculative_config.method",
            "eagle3",
            "--speculative-config.model",
            DRAFT,
            "--speculative-config.num_speculative_tokens=2",
            "--max_model_len",
            "32k",
        ],
        V033,
    )
    assert dotted.speculative_config == {"method": "eagle3", "model": DRAFT, "num_speculative_tokens": 2}
    assert dotted.max_model_len == 32000
    short = vargs.parse([TARGET, "--spec-method", "eagle3", "--spec-model", DRAFT, "--spec-tokens", "4"], V033)
    assert short.speculative_config == {"method": "eagle3", "model": DRAFT, "num_speculative_tokens": 4}
    with pytest.raises(vargs.ConfigError, match=r"--spec-method and --speculative-config\['method'\] are mutually"):
        vargs.parse([TARGET, "--spec-method", "eagle3", *eagle3()], V033)


def resolve(ver: VllmVersion, *argv: str) -> vargs.EngineSetup:
    return vargs.resolve(vargs.parse([TARGET, "-tp", "8", *argv], ver), ver, H200_MIB)


def test_the_eagle3_target_gate_refuses_kimi_until_0_19() -> None:
    """kimi-k2.5-sim's model_type is kimi_k2: on the gate's list from 0.19, no list from 0.23 (reference §1.2)."""
    with pytest.raises(vargs.ConfigError) as raised:
        resolve(V092, *eagle3())
    assert (
        "Eagle3 is only supported for Llama models. Got self.target_model_config.hf_text_config.model_type='kimi_k2'"
        in raised.value.text
    )
    with pytest.raises(vargs.ConfigError) as raised:
        resolve(V011, *eagle3())
    assert raised.value.text.startswith(
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for SpeculativeConfig\n  Value error, "
        "Eagle3 is only supported for ['llama', 'qwen', 'minicpm', 'gpt_oss'] models."
    )
    for ok in ("0.19.1", "0.23.0", "0.30.0", "0.33.0"):
        setup = resolve(VllmVersion.parse(ok), *eagle3())
        assert setup.spec is not None and (setup.spec.method, setup.spec.num_spec_tokens) == ("eagle3", 3)
    # method "eagle" has no gate: a way to run the shipped draft on 0.9.2/0.11 (it then accepts nothing)
    assert resolve(
        V011, "--speculative-config", json.dumps({"method": "eagle", "model": DRAFT, "num_speculative_tokens": 2})
    ).spec


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            {"method": "eagle3", "model": DRAFT, "num_speculative_tokens": 3, "topk": 4},
            "1 validation error for SpeculativeConfig\ntopk\n  Unexpected keyword argument "
            "[type=unexpected_keyword_argument, input_value=4, input_type=int]",
        ),
        (
            {"method": "eagle3", "model": DRAFT, "num_speculative_tokens": 0},
            "Input should be greater than 0 [type=greater_than",
        ),
        (
            {"method": "eagle3", "num_speculative_tokens": 3},
            "num_speculative_tokens was provided but without speculative model.",
        ),
        (
            {"method": "eagle3", "model": DRAFT, "num_speculative_tokens": 3, "draft_tensor_parallel_size": 2},
            "speculative_draft_tensor_parallel_size=2 cannot be other value than 1 or target model "
            "tensor_parallel_size",
        ),
        (
            {"method": "eagle3", "model": DRAFT_131K, "num_speculative_tokens": 3, "max_model_len": 200000},
            "speculative_max_model_len=200000 cannot be larger than draft_max_model_len=131072",
        ),
        (
            {"method": "medusa", "model": DRAFT, "num_speculative_tokens": 3},
            "Unknown speculative decoding method: medusa",
        ),
    ],
)
def test_speculative_config_errors_0_33(config: dict[str, object], message: str) -> None:
    with pytest.raises(vargs.ConfigError) as raised:
        resolve(V033, "--speculative-config", json.dumps(config))
    assert message in raised.value.text


def test_num_speculative_tokens_zero_before_0_33_is_a_value_error() -> None:
    config = json.dumps({"method": "eagle", "model": DRAFT, "num_speculative_tokens": 0})
    with pytest.raises(vargs.ConfigError, match=r"Expected num_speculative_tokens to be greater than zero \(0\)\."):
        resolve(V011, "--speculative-config", config)


def test_max_model_len_above_the_model_is_refused() -> None:
    with pytest.raises(vargs.ConfigError) as raised:
        resolve(V011, "--max-model-len", "300000")
    assert "1 validation error for ModelConfig" in raised.value.text
    assert (
        "User-specified max_model_len (300000) is greater than the derived max_model_len "
        "(max_position_embeddings=262144 or model_max_length=None in model's config.json)" in raised.value.text
    )
    assert resolve(V011, "--max-model-len", "8192").max_model_len == 8192
    assert resolve(V011).max_num_seqs == 1024  # a >= 70 GiB GPU


def test_log_prefixes_per_era() -> None:
    assert lines.process_prefix("APIServer", 7, True) == "\x1b[1;36m(APIServer pid=7)\x1b[0;0m "
    assert (V092.prefix_style, V011.prefix_style, V033.prefix_style) == ("workers", "wrapper", "formatter")
    assert (V092.engine_core_name, V011.engine_core_name, V033.engine_core_name) == (
        "EngineCore_0",
        "EngineCore_DP0",
        "EngineCore",
    )
    assert (V092.worker_name(1), VllmVersion.parse("0.10.1").worker_name(1), V011.worker_name(1)) == (
        "VllmWorker rank=1",
        "VllmWorker TP1",
        "Worker_TP1",
    )
    assert V011.colour({}, False) and not V033.colour({}, False) and V033.colour({"VLLM_LOGGING_COLOR": "1"}, False)
    assert not VllmVersion.parse("0.13.0").colour({"NO_COLOR": "1"}, True)
    record = lines.format_record("(EngineCore pid=3) ", "ERROR 12-07 10:00:00 [core.py:708] ", "failed.\nTraceback")
    assert record == (
        "(EngineCore pid=3) ERROR 12-07 10:00:00 [core.py:708] failed.\r\n"
        "(EngineCore pid=3) ERROR 12-07 10:00:00 [core.py:708] Traceback\n"
    )
    assert re.match(lines.PREFIX_RE, "(APIServer pid=1) INFO 10-26 12:36:26 [loggers.py:127] Engine 000: x")


def test_spec_decoding_lines_formats_a_and_b() -> None:
    a = lines.spec_line(V092, 100, 300, 214, [86, 71, 57], 10.0)
    assert a == (
        "SpecDecoding metrics: Draft acceptance rate: 71.3%, Mean acceptance length: 3.14, Accepted: 214 tokens, "
        "Drafted: 300 tokens, Per-position acceptance rate: 0.860, 0.710, 0.570"
    )
    assert re.search(lines.SPEC_A_RE, a)
    b = lines.spec_line(V011, 203, 609, 206, [122, 58, 26], 10.0)
    assert b == (
        "SpecDecoding metrics: Mean acceptance length: 2.01, Accepted throughput: 20.60 tokens/s, Drafted "
        "throughput: 60.90 tokens/s, Accepted: 206 tokens, Drafted: 609 tokens, Per-position acceptance rate: "
        "0.601, 0.286, 0.128, Avg Draft acceptance rate: 33.8%"
    )
    assert re.search(lines.SPEC_B_RE, b) and V0102.spec_format == "B"
    stats = lines.stats_line(V011, 0.0, 47.4, 1, 0, 0.019, 0.372)
    assert stats == (
        "Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 47.4 tokens/s, Running: 1 reqs, "
        "Waiting: 0 reqs, GPU KV cache usage: 1.9%, Prefix cache hit rate: 37.2%"
    )
    assert re.search(lines.STATS_RE, stats)


def test_startup_line_shapes_per_version() -> None:
    assert lines.kv_cache_lines(V011, 1234560, 8192) == [
        "GPU KV cache size: 1,234,560 tokens",
        "Maximum concurrency for 8,192 tokens per request: 150.70x",
    ]
    assert lines.kv_cache_lines(V033, 1234560, 8192) == [
        "GPU KV cache size: 1,234,560 tokens, Maximum concurrency for 8,192 tokens per request: 150.70x"
    ]
    assert V011.model_loading_line(15.4, 6.123456) == "Model loading took 15.4000 GiB and 6.123456 seconds"
    assert V033.model_loading_line(15.4, 6.123456) == "Model loading took 15.4 GiB memory and 6.123456 seconds"
    assert (
        V092.serving_line.format(i=0, url="http://0.0.0.0:8000") == "Starting vLLM API server 0 on http://0.0.0.0:8000"
    )
    assert V033.serving_line.format(i=0, url="http://0.0.0.0:8000") == "Starting vLLM server on http://0.0.0.0:8000"
    assert (V092.health_dead_status, V0102.health_dead_status, V011.health_dead_status) == (500, 500, 503)
    assert (
        lines.speculative_config_repr("eagle3", "/d", 3)
        == "SpeculativeConfig(method='eagle3', model='/d', num_spec_tokens=3)"
    )


def test_failure_texts() -> None:
    assert tracebacks.engine_init_failed(V011, 1).endswith(
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): "
        "{'EngineCore_DP0': 1}"
    )
    assert tracebacks.free_memory(V011, 0, 3.22, 4.0, 0.9) == (
        "ValueError: Free memory on device (3.22/4.00 GiB) on startup is less than desired GPU memory utilization "
        "(0.9, 3.60 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes."
    )
    assert "on device cuda:0 (3.22/4.00 GiB)" in tracebacks.free_memory(V033, 0, 3.22, 4.0, 0.9)
    assert "models's max seq len (8192)" in tracebacks.max_seq_len_too_long(V011, 8192, 2.0, 1.0, 4096)
    assert tracebacks.no_cache_blocks(V033).endswith("conserving_memory/ for more details.")


def test_prometheus_exposition() -> None:
    assert metrics.go_float(5) == "5.0"
    assert metrics.go_float(1796153690.6873662) == "1.7961536906873662e+09"
    assert metrics.go_float(float("inf")) == "+Inf"
    text = "\n".join(
        metrics.counter(
            "vllm:spec_decode_num_drafts",
            "Number of spec decoding drafts.",
            [({"model_name": "m", "engine": "0"}, 5)],
            1796153690.6873662,
        )
    )
    assert text == (
        "# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.\n"
        "# TYPE vllm:spec_decode_num_drafts_total counter\n"
        'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 5.0\n'
        "# HELP vllm:spec_decode_num_drafts_created Number of spec decoding drafts.\n"
        "# TYPE vllm:spec_decode_num_drafts_created gauge\n"
        'vllm:spec_decode_num_drafts_created{engine="0",model_name="m"} 1.7961536906873662e+09'
    )


def test_the_same_hardware_as_sglang() -> None:
    """K chained top-1 drafts = SGLang's steps K, topk 1, K+1 draft tokens, spec v1 (no overlap): same speed."""
    setup = resolve(V033, *eagle3(3))
    cfg = speed.SpecConfig.from_server_args(engine_args(setup))
    sglang = speed.SpecConfig(algorithm="EAGLE3", num_steps=3, topk=1, num_draft_tokens=4, overlap=False)
    assert cfg == speed.SpecConfig(**{**sglang.__dict__, "cuda_graph_max_bs": 512})
    assert speed.ground_truth(cfg, 1) == speed.ground_truth(sglang, 1)
    eager = speed.SpecConfig.from_server_args(engine_args(resolve(V033, *eagle3(2), "--enforce-eager")))
    assert not eager.cuda_graph and eager.num_steps == 2
    baseline = speed.SpecConfig.from_server_args(engine_args(resolve(V033)))
    assert baseline.algorithm is None and not baseline.overlap  # async scheduling is opt-in
    assert speed.SpecConfig.from_server_args(engine_args(resolve(V033, "--async-scheduling"))).overlap


def test_a_host_setup_selects_the_vllm_version() -> None:
    setup = hostsetup.shell_setup(hostsetup.REPO / "var", 1, vllm_version="0.33.0")
    assert "export SIMHOST_VLLM_VERSION=0.33.0" in setup.splitlines()
    assert "SIMHOST_VLLM_VERSION" not in hostsetup.shell_setup(hostsetup.REPO / "var", 1)
    assert hostsetup.VLLM_LAUNCHER == "python -m simhost.vllm_serve"


def test_the_stdout_wrapper_prefixes_lines_not_tqdm_updates() -> None:
    assert lines.prefix_lines("(W pid=1) ", "bar 0%\rbar 100%\n") == "(W pid=1) bar 0%\rbar 100%\n"
    assert lines.prefix_lines("(W pid=1) ", "a\n\nb\n") == "(W pid=1) a\n(W pid=1) \n(W pid=1) b\n"
    assert lines.prefix_lines("", "a\n") == "a\n"
