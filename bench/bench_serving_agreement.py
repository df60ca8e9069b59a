"""Does the benchmark client read the output throughput SGLang's own `bench_serving` reads, on every prompt kind?

    SIMHOST_BENCH_VENV=/tmp/sgl-bench .venv/bin/python bench/bench_serving_agreement.py [--rounds 6] [--prompts 8]
        [--length 128] [--kinds random-ids:1,random-ids:4,random-ids-same:4,sharegpt:4] [--speculative]

One simulated server (step and launch noise off, radix cache off, as the opt-in agreement tests launch it) and
the two clients run against it in turn, A B A B ..., the order alternating round by round so a slow drift of the
machine cancels out: the shipped client (`python -m workers.benchclient`, one process, as a worker runs it) and
`python -m sglang.bench_serving` from the venv SIMHOST_BENCH_VENV names (run by simhost/tools/bench_serving.py,
simhost/README.md "Real SGLang client").

Kinds, each `name:concurrency`:
- random-ids: each client's own random ids at --length in and out, what a random-ids profile is compared with:
  the shipped client's `--input-len`/`--output-len` (token ids drawn with its seed) against bench_serving's
  `--dataset-name random-ids --random-range-ratio 1.0` (consecutive ids from a seeded offset, sent as their text);
- random-ids-same: bench_serving's very random-ids prompts for both, the shipped client reading them (their text,
  drawn by bench_serving's own sampler with its seed) from a prompts file;
- sharegpt: the same ShareGPT sample for both (as workers/tests/test_bench_serving_agreement.py builds it).

Each round prints both clients' output throughput, benchmark duration and token counts, and the ratio
specdash / bench_serving; the summary gives the median ratio with its range over the rounds. Beside each run, the
server's own account of it, read from its log (every decode step logged): how many prefill batches and decode
steps the run cost, the output tokens per request-step (the accept length the server delivered) and their time on
the speed model, which a loaded CPU cannot stretch. A gap in the clients' figures that the server's account shares
is different work the clients asked for (other prompts, or requests arriving in other batches); a gap it does not
share is where a client's clock starts and stops. Results: bench/README.md (2026-12-04).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MODEL = REPO / "simhost" / "models" / "kimi-k2.5-sim"
DRAFT = REPO / "simhost" / "models" / "kimi-k2.5-sim-eagle3"
TOKENIZER = MODEL / "tokenizer"
TOOLS = REPO / "simhost" / "tools"
sys.path.insert(0, str(REPO))

from benchclient_capacity import wait_ready  # noqa: E402  (bench/ is the script's folder)

from simhost import args as server_args  # noqa: E402
from simhost import speed  # noqa: E402
from simhost.ports import free_port  # noqa: E402

EAGLE3 = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", str(DRAFT),
          "--speculative-num-steps", "2", "--speculative-eagle-topk", "1",
          "--speculative-num-draft-tokens", "3"]  # fmt: skip
QUIET = {"SIMHOST_NOISE": "0", "SIMHOST_LAUNCH_NOISE": "0"}
SEED = 1
_PREFILL = re.compile(r"Prefill batch[^#]*#new-seq: (\d+), #new-token: (\d+)")
_DECODE = re.compile(r"Decode batch[^#]*#running-req: (\d+)")


@dataclass(frozen=True)
class Kind:
    name: str
    concurrency: int

    @property
    def label(self) -> str:
        return f"{self.name} c={self.concurrency}"


@dataclass
class ServerAccount:
    """What the server did for one client run, from its log: its batches and their time on the speed model."""

    prefills: list[int]  # new sequences per prefill batch
    decode_batches: list[int]  # running requests per decode step
    model_s: float

    def tokens_per_request_step(self, output_tokens: int) -> float:
        """Output tokens per request per decode step (the prefill makes each request's first): the accept length
        the server delivered over the run."""
        request_steps = sum(self.decode_batches)
        return (output_tokens - sum(self.prefills)) / request_steps if request_steps else 0.0

    def describe(self, output_tokens: int) -> str:
        return (
            f"{len(self.prefills)} prefills, {len(self.decode_batches)} decode steps "
            f"({self.tokens_per_request_step(output_tokens):.3f} tokens per request-step), "
            f"model time {self.model_s:.3f} s"
        )


def _server_account(log: Path, offset: int, cfg: speed.SpecConfig) -> ServerAccount:
    """The measured requests' steps logged after `offset`. The warm-up request runs alone and ends before the
    measured ones start: the first prefill and the decode steps before the second are its, and left out."""
    params = speed.SpeedParams()
    with log.open("rb") as lines:
        lines.seek(offset)
        text = lines.read().decode("utf-8", "replace")
    prefills: list[tuple[int, int]] = []
    decodes: list[int] = []
    for line in text.splitlines():
        if match := _PREFILL.search(line):
            prefills.append((int(match.group(1)), int(match.group(2))))
        elif (match := _DECODE.search(line)) and len(prefills) > 1:
            decodes.append(int(match.group(1)))
    prefills = prefills[1:]
    model_ms = sum(speed.prefill_ms(params, cfg, tokens) for _, tokens in prefills)
    model_ms += sum(speed.iteration_ms(params, cfg, batch) for batch in decodes)
    return ServerAccount([seqs for seqs, _ in prefills], decodes, model_ms / 1000)


@dataclass
class Run:
    duration_s: float
    input_tokens: int
    output_tokens: int
    output_throughput: float
    completed: int
    server: ServerAccount | None = None

    def describe(self) -> str:
        assert self.server is not None
        return (
            f"{self.output_throughput:8.2f} tok/s = {self.output_tokens} out / {self.duration_s:.3f} s "
            f"({self.input_tokens} in); server: {self.server.describe(self.output_tokens)}"
        )


def _specdash(base_url: str, kind: Kind, args: argparse.Namespace, prompts_file: Path | None) -> Run:
    source = ["--prompts-file", str(prompts_file)] if prompts_file else []
    done = subprocess.run(
        [sys.executable, "-m", "workers.benchclient", "--base-url", base_url, "--concurrency", str(kind.concurrency),
         "--num-prompts", str(args.prompts), "--input-len", str(args.length), "--output-len", str(args.length),
         "--seed", str(SEED), "--metrics-interval-ms", "0", *source],
        cwd=REPO, capture_output=True, text=True, check=True,
    )  # fmt: skip
    result = json.loads(done.stdout)
    return Run(
        result["duration_s"],
        result["total_input_tokens"],
        result["total_output_tokens"],
        result["output_throughput"],
        result["completed"],
    )


def _bench_serving(base_url: str, kind: Kind, args: argparse.Namespace, dataset: Path | None, work: Path) -> Run:
    out = work / "bench_serving.jsonl"
    out.unlink(missing_ok=True)
    if kind.name == "sharegpt":
        source = ["--dataset-name", "sharegpt", "--dataset-path", str(dataset)]
    else:
        source = ["--dataset-name", "random-ids", "--random-input-len", str(args.length),
                  "--random-output-len", str(args.length), "--random-range-ratio", "1.0"]  # fmt: skip
    argv = [
        str(Path(args.venv) / "bin" / "python"), str(TOOLS / "bench_serving.py"), "--backend", "sglang",
        "--base-url", base_url, *source, "--tokenizer", str(TOKENIZER), "--num-prompts", str(args.prompts),
        "--max-concurrency", str(kind.concurrency), "--seed", str(SEED), "--output-file", str(out), "--disable-tqdm",
    ]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, env=_venv_env(), cwd=work)
    if done.returncode != 0:
        raise SystemExit(f"bench_serving failed:\n{done.stderr[-3000:]}")
    result = json.loads(out.read_text().splitlines()[-1])
    return Run(
        result["duration"],
        result["total_input_tokens"],
        result["total_output_tokens"],
        result["output_throughput"],
        result["completed"],
    )


def _venv_env() -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def _bench_serving_random_ids(args: argparse.Namespace, work: Path) -> Path:
    """bench_serving's random-ids prompts (its sampler, its seed) as a prompts file for the shipped client."""
    done = subprocess.run(
        [str(Path(args.venv) / "bin" / "python"), str(TOOLS / "bench_serving_random_ids.py"), str(TOKENIZER),
         str(SEED), str(args.prompts), str(args.length)],
        capture_output=True, text=True, env=_venv_env(), cwd=work, check=True,
    )  # fmt: skip
    path = work / "random-ids-same.jsonl"
    path.write_text(done.stdout)
    return path


def _sharegpt_files(prompts: int, work: Path) -> tuple[Path, Path]:
    """The ShareGPT sample as specdash ships it (prompts file) and as bench_serving reads it (a valid JSON file of
    the very conversations specdash read, in the same order, so its seeded shuffle draws the same prompts)."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
    os.environ.setdefault("SECRET_KEY", "bench-only")
    import django

    django.setup()
    from experiments.formats import prompt_sampling
    from experiments.models import prompt_store

    sharegpt = prompt_store.sharegpt_conversations()
    dataset = work / "sharegpt.json"
    dataset.write_bytes(prompt_sampling.sharegpt_bytes(sharegpt.conversations))
    sample = prompt_sampling.sample(sharegpt.conversations, prompts, SEED, input_cap=1 << 30, output_cap=1 << 30)
    prompts_file = work / "sharegpt-prompts.jsonl"
    prompts_file.write_bytes(prompt_sampling.sample_bytes(sample))
    return dataset, prompts_file


def _spread(values: list[float]) -> str:
    return f"median {statistics.median(values):.4f} (range {min(values):.4f}-{max(values):.4f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--venv", default=os.environ.get("SIMHOST_BENCH_VENV", "/tmp/sgl-bench"))
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--length", type=int, default=128, help="random ids: input and output tokens per request")
    parser.add_argument("--kinds", default="random-ids:1,random-ids:4,random-ids-same:4,sharegpt:4")
    parser.add_argument("--speculative", action="store_true", help="serve EAGLE3 (2 steps) instead of the baseline")
    args = parser.parse_args()
    kinds = [Kind(name, int(c)) for name, c in (item.split(":") for item in args.kinds.split(","))]
    if not (Path(args.venv) / "bin" / "python").exists():
        raise SystemExit(f"no venv at {args.venv} (simhost/README.md 'Real SGLang client')")
    flags = ["--model-path", str(MODEL), "--disable-radix-cache", "--decode-log-interval", "1",
             *(EAGLE3 if args.speculative else [])]  # fmt: skip
    # The step costs the server runs on, from its own reading of the flags.
    cfg = speed.SpecConfig.from_server_args(server_args.resolve(flags, {})[0])

    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        names = {kind.name for kind in kinds}
        dataset, sharegpt_prompts = _sharegpt_files(args.prompts, work) if "sharegpt" in names else (None, None)
        same_prompts = _bench_serving_random_ids(args, work) if "random-ids-same" in names else None
        prompts_files = {"random-ids": None, "random-ids-same": same_prompts, "sharegpt": sharegpt_prompts}
        port = free_port()
        base_url = f"http://127.0.0.1:{port}"
        env = {**os.environ, "PYTHONPATH": str(REPO), "SIMHOST_LOAD_SECONDS": "0.3",
               "SIMHOST_STATE_DIR": str(work / "state"), **QUIET}  # fmt: skip
        log_path = work / "server.log"
        with log_path.open("wb") as log:
            server = subprocess.Popen(
                [sys.executable, "-m", "simhost.launch_server", *flags, "--port", str(port)],
                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        summary: dict[Kind, list[tuple[Run, Run]]] = {}
        try:
            wait_ready(port, server)
            for kind in kinds:
                pairs = summary.setdefault(kind, [])
                for round_ in range(args.rounds):
                    order = ("specdash", "bench_serving") if round_ % 2 == 0 else ("bench_serving", "specdash")
                    runs: dict[str, Run] = {}
                    for client in order:
                        offset = log_path.stat().st_size
                        if client == "specdash":
                            run = _specdash(base_url, kind, args, prompts_files[kind.name])
                        else:
                            run = _bench_serving(base_url, kind, args, dataset, work)
                        run.server = _server_account(log_path, offset, cfg)
                        runs[client] = run
                    ours, theirs = runs["specdash"], runs["bench_serving"]
                    pairs.append((ours, theirs))
                    print(
                        f"{kind.label} round {round_ + 1}: specdash / bench_serving "
                        f"{ours.output_throughput / theirs.output_throughput:.4f}",
                        flush=True,
                    )
                    for client in order:
                        print(f"  {client:>13}: {runs[client].describe()}", flush=True)
        finally:
            server.terminate()
            server.wait(timeout=30)

    print(f"\n{args.prompts} prompts, {args.rounds} interleaved rounds, {'EAGLE3' if args.speculative else 'baseline'}")
    for kind, pairs in summary.items():
        throughput = [ours.output_throughput / theirs.output_throughput for ours, theirs in pairs]
        duration = [theirs.duration_s / ours.duration_s for ours, theirs in pairs]
        assert all(ours.server and theirs.server for ours, theirs in pairs)
        model = [theirs.server.model_s / ours.server.model_s for ours, theirs in pairs]  # type: ignore[union-attr]
        overhead = [
            (ours.duration_s - ours.server.model_s, theirs.duration_s - theirs.server.model_s)  # type: ignore[union-attr]
            for ours, theirs in pairs
        ]
        print(f"{kind.label}: output throughput specdash / bench_serving {_spread(throughput)}")
        print(
            f"  duration bench_serving / specdash {_spread(duration)}; server model time, same ratio {_spread(model)}"
        )
        print(
            "  duration beyond the server's model time: specdash "
            f"{statistics.median(o for o, _ in overhead) * 1000:.0f} ms, bench_serving "
            f"{statistics.median(t for _, t in overhead) * 1000:.0f} ms (medians)"
        )
        print(
            f"  output tokens: specdash {sorted({o.output_tokens for o, _ in pairs})}, bench_serving "
            f"{sorted({t.output_tokens for _, t in pairs})}; input tokens: specdash "
            f"{sorted({o.input_tokens for o, _ in pairs})}, bench_serving {sorted({t.input_tokens for _, t in pairs})}"
        )


if __name__ == "__main__":
    main()
