"""The batching loop: one asyncio task runs prefill batches and decode steps for every running request,
sleeping what the speed model says, and prints the rank-0 `Prefill batch` / `Decode batch` lines."""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
import uuid
import zlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simhost import acceptance, adaptive, gpu, lines, logs, profiler, speed, telemetry, versions, workload

WORDS = (
    "the of and a to in is that it for on with as was at by this be from are or an which have not one had "
    "but all were when we there can more if no out so said what up its about into than them only other new "
    "some could time these two may then first any like now my such make over our even most after also"
).split()


_SPACED_WORDS = [" " + word for word in WORDS]
# How far behind the simulated GPU's clock the CPU may fall before the clock restarts instead of catching up. A
# loaded 2-core test machine starved a simulated server for ~2.5 s once (a benchmark cell then read 40% of its
# speed); a process stopped for longer is a stopped process, not a busy GPU.
MAX_CATCH_UP_S = 5.0
# sglang:e2e_request_latency_seconds's bucket bounds (seconds).
E2E_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0, 400.0)


def word_ids(words: list[str], vocab: int) -> list[int]:
    return [zlib.crc32(w.encode()) % vocab for w in words]


@dataclass(frozen=True)
class StepEnd:
    """Where the cumulative output stood after one engine step that emitted tokens for a request."""

    tokens: int
    text_chars: int
    ids_chars: int


@dataclass(eq=False)
class Request:
    input_ids: list[int]
    max_new_tokens: int
    kind: str = "generate"  # generate | health | warmup
    rid: str = field(default_factory=lambda: uuid.uuid4().hex)
    p: float = 0.0
    # Hooks of simhost/acceptance.py: the prompt's multiplier on accept_p, and where a draft_bug server's output
    # leaves the right one (-1: never).
    accept_factor: float = 1.0
    diverge_at: int = -1
    # Hooks of simhost/workload.py: the prompt's repeat weight (0: acceptance as it is), the output position where
    # a repetition loop starts (-1: never) and its period, and how many template ids another prompt template put
    # at the head of input_ids (their outputs differ from the first token).
    repeat_weight: float = 0.0
    loop_after: int = -1
    loop_period: int = 4
    template_tokens: int = 0
    created: float = field(default_factory=time.monotonic)
    output_ids: list[int] = field(default_factory=list)
    # The output kept ready to serialize: the cumulative text (" word" per token; plain ASCII, nothing to
    # escape in JSON), the ids as the inside of a JSON array, and one StepEnd per step, so a stream can send
    # one event per step even when it wakes up after several.
    text: str = ""
    ids_json: str = ""
    step_ends: list[StepEnd] = field(default_factory=list)
    cached_tokens: int = 0
    verify_ct: int = 0
    accepted_drafts: int = 0
    # Drafts the verify steps proposed: steps x verify ct on a static server, the sum of each step's own steps under
    # --speculative-adaptive.
    proposed_drafts: int = 0
    # Index i: the verify steps that accepted exactly i drafts (as counted into accepted_drafts).
    drafts_histogram: list[int] = field(default_factory=list)
    finished: bool = False
    aborted: bool = False
    first_token_at: float | None = None
    finished_at: float | None = None
    # The simulated GPU's clock (Engine.gpu_seconds) when the request entered the engine: its server-side latency
    # is measured on that clock, which a loaded CPU cannot stretch.
    gpu_arrived: float = 0.0
    # The request's own acceptance draws (Engine.submit seeds it from the prompt).
    rng: random.Random = field(default_factory=random.Random)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def abort(self) -> None:
        """The client went away: stop generating for it, as SGLang aborts a disconnected request (so a server told
        to drain on SIGTERM is not held up by requests nobody will read)."""
        if not self.finished:
            self.finished, self.aborted = True, True
            self.finished_at = time.monotonic()
            self.changed.set()

    def emit(self, count: int, vocab: int, token: int | None = None) -> None:
        """Append `count` output tokens: the request's own text, or `token` repeated (simulated acceptance's fixed
        token mode writes one token id for everything a verify step accepts)."""
        start = len(self.output_ids)
        prompt = self.input_ids[self.template_tokens :]
        seed = sum(prompt[:8]) + len(prompt)
        positions = range(start, start + count)
        if self.loop_after >= 0:
            positions = [workload.loop_source(i, self.loop_after, self.loop_period) for i in positions]  # type: ignore[assignment]
        new = [((seed + 7 * i) % len(WORDS) + 1000 * ((seed + i) % 7)) % vocab for i in positions]
        if self.template_tokens:
            new = [(t + 1) % vocab for t in new]
        if token is not None:
            new = [token % vocab] * count
        elif self.diverge_at >= 0:
            new = [acceptance.draft_bug_token(start + j, t, self.diverge_at, vocab) for j, t in enumerate(new)]
        self.output_ids += new
        self.text += "".join([_SPACED_WORDS[t % len(WORDS)] for t in new])
        self.ids_json += ("," if self.ids_json else "") + ",".join(map(str, new))
        self.step_ends.append(StepEnd(len(self.output_ids), len(self.text), len(self.ids_json)))
        if self.first_token_at is None:
            self.first_token_at = time.monotonic()
        if len(self.output_ids) >= self.max_new_tokens:
            self.finished = True
            self.finished_at = time.monotonic()
        self.changed.set()


@dataclass
class Stats:
    prompt_tokens: int = 0
    generation_tokens: int = 0
    requests: int = 0
    finished_requests: int = 0  # non-warm-up, non-health requests that completed
    # The Prometheus counters: what SGLang's observe_one_finished_request adds when a request finishes (requests
    # still in flight are not in them), health checks aside.
    finished_generation_tokens: int = 0
    finished_verify_calls: int = 0
    cached_tokens: int = 0
    last_gen_throughput: float = 0.0
    # speculative window (since the last Decode line) and lifetime totals
    spec_accepted: int = 0  # accepted drafts + 1 bonus per request per verify step
    spec_forward_ct: int = 0
    spec_total_accepted: int = 0
    spec_total_forward_ct: int = 0
    last_accept_length: float = 0.0
    last_accept_rate: float = 0.0
    # sglang:spec_num_steps / spec_num_draft_tokens: the steps of the batch at the last Decode line (they move under
    # --speculative-adaptive)
    last_num_steps: int = 0
    last_num_draft_tokens: int = 0
    # The scheduler's Prometheus gauges as of the last log tick (a prefill batch or every decode_log_interval decode
    # steps): SGLang sets them there, not on every scrape, so a scrape between ticks reads the last tick's values.
    last_running_reqs: int = 0
    last_queue_reqs: int = 0
    last_used_tokens: int = 0
    last_token_usage: float = 0.0
    # sglang:e2e_request_latency_seconds, on the simulated GPU's clock: sum, count and per-bucket counts
    e2e_latency_sum: float = 0.0
    e2e_latency_count: int = 0
    e2e_latency_buckets: list[int] = field(default_factory=lambda: [0] * len(E2E_BUCKETS))

    def observe_e2e_latency(self, seconds: float) -> None:
        self.e2e_latency_sum += seconds
        self.e2e_latency_count += 1
        for i, bound in enumerate(E2E_BUCKETS):
            if seconds <= bound:
                self.e2e_latency_buckets[i] += 1


class Engine:
    def __init__(
        self,
        args: Any,
        ready: dict[str, Any],
        params: speed.SpeedParams,
        knobs: dict[str, float],
        seed: int,
        ver: versions.Version | None = None,
        acceptance_seed: int = 0,
        simulated: adaptive.SimulatedAcceptance | None = None,
    ) -> None:
        self.args = args
        self.ver = ver or versions.Version.parse(versions.DEFAULT)
        self.cfg = speed.SpecConfig.from_server_args(args)
        self.params = params
        self.rng = random.Random(seed)
        self.acceptance_seed = acceptance_seed & 0xFFFFFFFF
        self.max_total_tokens = int(ready["max_total_num_tokens"])
        self.max_running = int(ready["max_running_requests"])
        self.vocab = int(knobs.get("vocab_size", 32000))
        self.speed = knobs["speed"]
        # With the speed model off, this many steps run between two yields to the event loop, so each stream
        # is written once per burst (its per-step events in one send) instead of once per step: on loopback a
        # send costs about as much as everything else the server does for a token.
        self.fast_burst_steps = max(1, int(knobs.get("fast_burst_steps", 8)))
        self.noise = knobs["noise"]
        self.slowdown = knobs["slowdown"] * max(0.5, self.rng.gauss(1.0, knobs["launch_noise"]))
        self.drift = knobs["drift"]
        self.throttle_after = knobs.get("throttle_after", -1.0)  # < 0: never
        self.throttle_factor = knobs.get("throttle_factor", 1.0)
        # What nvidia-smi reports for this server's GPUs follows its steps: busy, and throttled when it is.
        self.activity = telemetry.ActivityNote(gpu.visible_gpus()[: max(1, int(getattr(args, "tp_size", 1) or 1))])
        self.profile = bool(knobs.get("profile", 0.0)) and bool(self.cfg.algorithm)
        self.profile_every = max(1, int(knobs.get("profile_every", 1)))
        self.verify_steps = 0
        # /start_profile's torch profiler (simhost/profiler.py): told of every step, writes the traces.
        self.profiler = profiler.Profiler(self.cfg, params, int(getattr(args, "tp_size", 1) or 1))
        self.accept_p = knobs["ngram_accept_p"] if self.cfg.algorithm == "NGRAM" else knobs["accept_p"]
        self.accept_spread = knobs["accept_spread"]
        # An EAGLE3 draft served as EAGLE (acceptance.accepts_nothing): every draft is rejected, silently.
        self.accepts_nothing = bool(knobs.get("accepts_nothing", 0.0))
        # SGLANG_SIMULATE_ACC_LEN: every verify step accepts a set length whatever the draft (simhost/adaptive.py);
        # its draws have their own generator, so turning it on leaves the noise draws of the steps as they were.
        self.simulated = simulated if self.cfg.algorithm in ("EAGLE", "EAGLE3", "STANDALONE") else None
        self.simulated_rng = random.Random(seed ^ 0x5A5A)
        # What the first verify step raises when the simulation is misconfigured; main wires it to a scheduler crash.
        self.on_fatal: Callable[[str], None] | None = None
        self.adaptive: adaptive.AdaptiveSteps | None = None
        if getattr(args, "speculative_adaptive", False) and self.cfg.algorithm:
            path = getattr(args, "speculative_adaptive_config", None)
            graph_bs = ready.get("cuda_graph_bs") if self.cfg.cuda_graph else None
            self.adaptive = adaptive.AdaptiveSteps(
                adaptive.parse_config(Path(path).read_text() if path else None), self.cfg.num_steps, graph_bs
            )
        # The workload faults (output_loop, template_mismatch); main sets them from SIMHOST_FAULTS.
        self.workload = workload.WorkloadFaults()
        self.started = time.monotonic()
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.stats = Stats()
        self.decode_ct = 0
        self.prefix_cache: deque[tuple[int, ...]] = deque(maxlen=256)
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._t = 0.0
        self._clock_restart = True
        # The simulated GPU's own clock: the model time of every step it ran (idle time aside), what the GPU would
        # have taken whatever the CPU running the simulation was doing.
        self.gpu_seconds = 0.0
        self._steps_unyielded = 0
        self._last_decode_log = time.monotonic()
        self._tokens_since_log = 0
        self._last_prefill_log = time.monotonic()
        self._last_prefill_tokens = 0
        self.stats_init_steps()

    def stats_init_steps(self) -> None:
        self.stats.last_num_steps = self.cfg.num_steps
        self.stats.last_num_draft_tokens = self.cfg.num_draft_tokens
        if self.adaptive is not None:
            self._log(self.adaptive.init_line)

    @property
    def max_accepted_drafts(self) -> int:
        """The most drafts any verify step of this server can accept (the size of a request's histogram)."""
        if self.adaptive is not None:
            return self.adaptive.max_steps
        return self.cfg.max_accepted_drafts

    def step_config(self, bs: int) -> speed.SpecConfig:
        """The speculation a decode step at batch bs runs: the server's, or under --speculative-adaptive the steps
        its batch-size slot chose now (draft tokens = steps + 1 at topk 1; 0 steps = a plain decode step)."""
        if self.adaptive is None:
            return self.cfg
        steps = self.adaptive.steps_for_batch(bs)
        if steps == 0:
            return dataclasses.replace(self.cfg, algorithm=None, num_steps=0, num_draft_tokens=1)
        return dataclasses.replace(self.cfg, num_steps=steps, num_draft_tokens=steps + 1)

    # -- public
    @property
    def is_idle(self) -> bool:
        return not self.running and not self.waiting

    def submit(self, req: Request) -> None:
        if req.kind == "generate":
            self._shape(req)
        if self.cfg.algorithm:
            # What a draft accepts is a property of the prompt (at temperature 0 a real GPU accepts the same drafts
            # for the same prompt on every launch): the draws come from the prompt, not from the launch's noise.
            req.rng = random.Random(zlib.crc32(",".join(map(str, req.input_ids)).encode(), self.acceptance_seed))
            p = min(0.99, max(0.01, req.rng.gauss(self.accept_p, self.accept_spread) * req.accept_factor))
            p = workload.repeat_p(p, req.repeat_weight)
            req.p = 0.0 if self.accepts_nothing else speed.effective_p(p, self.cfg.branches, self.params.topk_gain)
            req.drafts_histogram = [0] * (self.max_accepted_drafts + 1)
        req.gpu_arrived = self.gpu_seconds
        self.waiting.append(req)
        self._idle.clear()
        self._wake.set()

    def _shape(self, req: Request) -> None:
        """What the workload and its faults do to a client's request (simhost/workload.py): the prompt's
        repetitiveness moves acceptance, a looping prompt's output loops, another template adds its ids."""
        if self.cfg.algorithm:
            share = workload.repetitiveness(req.input_ids)
            req.repeat_weight = workload.repeat_weight(share, self.cfg.algorithm)
        faults = self.workload
        if faults.loops(req.input_ids):
            req.loop_after, req.loop_period = faults.loop_after, faults.loop_period
        if faults.template_extra:
            req.input_ids = faults.template_ids(self.vocab) + req.input_ids
            req.template_tokens = faults.template_extra

    async def wait_idle(self) -> None:
        await self._idle.wait()

    def flush_cache(self) -> bool:
        if not self.is_idle:
            return False
        self.prefix_cache.clear()
        self.stats.spec_total_accepted = self.stats.spec_total_forward_ct = 0
        return True

    @property
    def avg_spec_accept_length(self) -> float | None:
        if not self.cfg.algorithm or not self.stats.spec_total_forward_ct:
            return None
        return self.stats.spec_total_accepted / self.stats.spec_total_forward_ct

    def token_usage(self) -> tuple[int, float]:
        used = sum(len(r.input_ids) + len(r.output_ids) for r in self.running)
        return used, used / self.max_total_tokens

    # -- loop
    async def run(self) -> None:
        while True:
            if self.is_idle:
                self._idle.set()
                self._wake.clear()
                await self._wake.wait()
                self._clock_restart = True  # an idle GPU owes no steps
                continue
            if self.profiler.frozen:
                await self.profiler.wait_frozen()
            if self.waiting and len(self.running) < self.max_running:
                await self._prefill()
            if self.running:
                await self._decode()

    def _log(self, message: str) -> None:
        logs.line(message, 0, self.args.tp_size)

    def step_factor(self) -> float:
        """Everything that scales a step besides the speed model: launch noise x slowdown, drift, throttling,
        and this step's noise (a fresh draw each call)."""
        uptime = time.monotonic() - self.started
        factor = self.slowdown * (1 + self.drift * uptime / 3600) * max(0.5, self.rng.gauss(1.0, self.noise))
        if self.is_throttled:
            factor *= self.throttle_factor
        return factor

    @property
    def is_throttled(self) -> bool:
        return 0 <= self.throttle_after <= time.monotonic() - self.started

    async def _advance(self, ms: float, factor: float | None = None) -> None:
        """Sleep one step of `ms` model milliseconds (times step_factor(), unless given), divided by SIMHOST_SPEED."""
        self.activity.note(self.is_throttled, self.throttle_factor)
        if self.speed <= 0:  # no sleeps, and no noise drawn for them; the GPU's clock runs at speed 1
            self.gpu_seconds += ms * (self.slowdown if factor is None else factor) / 1000
            self._steps_unyielded += 1
            if self._steps_unyielded >= self.fast_burst_steps:
                self._steps_unyielded = 0
                await asyncio.sleep(0)
            return
        ms *= self.step_factor() if factor is None else factor
        self.gpu_seconds += ms / 1000 / self.speed
        loop = asyncio.get_running_loop()
        now = loop.time()
        # The steps follow the simulated GPU's own clock, not the CPU's: a step the CPU ran late (a loaded machine
        # schedules this process late) is caught up by the next ones, so the throughput over a busy period is the
        # speed model's whatever else the machine runs. The clock restarts after idling, or when the CPU has been
        # starved for so long (a stopped process) that catching up would be a burst no GPU makes.
        if self._clock_restart or now - self._t > MAX_CATCH_UP_S:
            self._t = now
            self._clock_restart = False
        self._t += ms / 1000 / self.speed
        delay = self._t - loop.time()
        await asyncio.sleep(max(delay, 0))

    def _cached_prefix(self, ids: list[int]) -> int:
        if self.args.disable_radix_cache:
            return 0
        best = 0
        key = tuple(ids)
        for seen in self.prefix_cache:
            n = 0
            for a, b in zip(seen, key, strict=False):
                if a != b:
                    break
                n += 1
            best = max(best, n)
        return min(best, len(ids) - 1)

    async def _prefill(self) -> None:
        batch: list[Request] = []
        budget = int(self.args.max_prefill_tokens)
        while self.waiting and len(self.running) + len(batch) < self.max_running:
            req = self.waiting[0]
            if req.finished:  # aborted while it waited
                self.waiting.popleft()
                continue
            req.cached_tokens = self._cached_prefix(req.input_ids)
            new = len(req.input_ids) - req.cached_tokens
            if batch and new > budget:
                break
            budget -= new
            batch.append(self.waiting.popleft())
        new_tokens = sum(len(r.input_ids) - r.cached_tokens for r in batch)
        cached = sum(r.cached_tokens for r in batch)
        factor = self.step_factor() if self.speed > 0 else self.slowdown
        await self._advance(speed.prefill_ms(self.params, self.cfg, new_tokens), factor)
        self.profiler.on_step("prefill", len(batch), factor, new_tokens)
        now = time.monotonic()
        throughput = self._last_prefill_tokens / max(now - self._last_prefill_log, 1e-6)
        self._last_prefill_log, self._last_prefill_tokens = now, new_tokens
        _, usage = self.token_usage()
        self._tick_gauges()
        self._log(
            lines.prefill(
                self.ver, len(batch), new_tokens, cached, usage, len(self.running), len(self.waiting), throughput
            )
        )
        for req in batch:
            if req.kind != "health":
                self.prefix_cache.append(tuple(req.input_ids))
                self.stats.requests += 1
                self.stats.prompt_tokens += len(req.input_ids)
                self.stats.cached_tokens += req.cached_tokens
            req.emit(1, self.vocab)  # the prefill produces the first token
            self._count_finished(req)
            self.stats.generation_tokens += 1
            self._tokens_since_log += 1
            if not req.finished:
                self.running.append(req)

    def _count_finished(self, req: Request) -> None:
        if not req.finished:
            return
        if not req.aborted and req.kind == "generate":
            self.stats.finished_requests += 1
        if req.kind != "health":
            self.stats.finished_generation_tokens += len(req.output_ids)
            self.stats.finished_verify_calls += req.verify_ct
            self.stats.observe_e2e_latency(self.gpu_seconds - req.gpu_arrived)

    async def _decode(self) -> None:
        bs = len(self.running)
        cfg = self.step_config(bs)
        simulated_length = self._simulated_length(cfg)
        factor = self.step_factor()
        await self._advance(speed.iteration_ms(self.params, cfg, bs), factor)
        self.profiler.on_step("decode", bs, factor)
        step_accepted = 0
        accepted_per_request: list[int] = []
        token = None
        if simulated_length is not None and self.simulated and self.simulated.token_mode == "fixed":
            token = adaptive.FIXED_TOKEN_ID
        for req in self.running:
            if req.finished:  # aborted since the last step
                continue
            left = req.max_new_tokens - len(req.output_ids)
            if self.cfg.algorithm:
                if simulated_length is not None:
                    k = simulated_length - 1
                elif req.loop_after >= 0 and len(req.output_ids) >= req.loop_after and not self.accepts_nothing:
                    # A looping output: the draft has seen the loop and predicts it (workload.LOOP_ACCEPT_P).
                    k = speed.draw_accepted(req.rng, workload.LOOP_ACCEPT_P, cfg.max_accepted_drafts)
                else:
                    k = speed.draw_accepted(req.rng, req.p, cfg.max_accepted_drafts)
                # A 0-step adaptive iteration is counted as a verify of no drafts: one token per forward, so the
                # request's accept length (tokens / verify ct) stays the tokens per forward it really got.
                req.verify_ct += 1
                req.proposed_drafts += max(cfg.num_draft_tokens - 1, 0)
                # The last step keeps only the tokens left: the drafts beyond them are not counted as accepted.
                kept = min(k, left - 1)
                req.accepted_drafts += kept
                req.drafts_histogram[kept] += 1
                step_accepted += k
                accepted_per_request.append(k)
                self.stats.spec_accepted += k + 1
                self.stats.spec_forward_ct += 1
                n = min(k + 1, left)
            else:
                n = 1
            req.emit(n, self.vocab, token)
            self._count_finished(req)
            self.stats.generation_tokens += n
            self._tokens_since_log += n
        self.decode_ct += 1
        if self.adaptive is not None:
            change = self.adaptive.on_verify(accepted_per_request, bs)
            if change is not None:
                self._log(change.log_line)
        if self.profile:
            self.verify_steps += 1
            if self.verify_steps % self.profile_every == 0:
                self._log_profile(bs, factor, step_accepted, cfg)
        if self.decode_ct % max(1, int(self.args.decode_log_interval)) == 0:
            self._log_decode(bs, cfg)
        self.running = [r for r in self.running if not r.finished]

    def _simulated_length(self, cfg: speed.SpecConfig) -> int | None:
        """This step's simulated accept length (one for the whole batch, as SGLang draws it), or None when the
        simulation is off or the step drafts nothing. A misconfigured simulation fails here, at the first verify."""
        if self.simulated is None or not cfg.algorithm:
            return None
        error = self.simulated.error
        if error is not None:
            if self.on_fatal is not None:
                self.on_fatal(error)
                self.on_fatal = None
            return None
        return self.simulated.draw(self.simulated_rng, cfg.max_accepted_drafts + 1)

    def _log_profile(self, bs: int, factor: float, accepted: int, cfg: speed.SpecConfig) -> None:
        """`EAGLE3 profile: step=N bs=B draft: X ms (S steps) Target verify: Y ms accepted: A` (README)."""
        draft_ms, verify_ms = speed.iteration_parts(self.params, cfg, bs)
        scale = factor / self.speed if self.speed > 0 else factor
        self._log(
            f"EAGLE3 profile: step={self.verify_steps} bs={bs} draft: {draft_ms * scale:.2f} ms "
            f"({cfg.num_steps} steps) Target verify: {verify_ms * scale:.2f} ms accepted: {accepted}"
        )

    def _tick_gauges(self) -> None:
        st = self.stats
        st.last_running_reqs, st.last_queue_reqs = len(self.running), len(self.waiting)
        st.last_used_tokens, st.last_token_usage = self.token_usage()

    def _log_decode(self, bs: int, cfg: speed.SpecConfig) -> None:
        now = time.monotonic()
        st = self.stats
        st.last_gen_throughput = self._tokens_since_log / max(now - self._last_decode_log, 1e-6)
        self._last_decode_log, self._tokens_since_log = now, 0
        used, usage = self.token_usage()
        spec = None
        if self.cfg.algorithm:
            ct = max(st.spec_forward_ct, 1)
            st.last_accept_length = st.spec_accepted / ct
            st.last_accept_rate = self.ver.accept_rate(
                st.spec_accepted, ct, max(cfg.num_steps, 1), max(cfg.num_draft_tokens, 2)
            )
            st.last_num_steps, st.last_num_draft_tokens = cfg.num_steps, cfg.num_draft_tokens
            spec = (st.last_accept_length, st.last_accept_rate)
            st.spec_total_accepted += st.spec_accepted
            st.spec_total_forward_ct += st.spec_forward_ct
            st.spec_accepted = st.spec_forward_ct = 0
        self._tick_gauges()
        graph = speed.uses_cuda_graph(cfg, bs)
        self._log(lines.decode(self.ver, bs, used, usage, spec, graph, st.last_gen_throughput, len(self.waiting)))

    # -- results
    def meta_info(self, req: Request, tokens: int | None = None) -> dict[str, Any]:
        """The request's meta_info now, or as it stood when its output had `tokens` tokens (an earlier step)."""
        completion_tokens = len(req.output_ids) if tokens is None else tokens
        finished = req.finished and completion_tokens == len(req.output_ids)
        style = self.ver.meta_style
        meta: dict[str, Any] = {
            "id": req.rid,
            "finish_reason": {"type": "length", "length": req.max_new_tokens} if finished else None,
            "prompt_tokens": len(req.input_ids),
            "weight_version": self.args.weight_version,
            "num_retractions" if style == "v0512" else "total_retractions": 0,
            "completion_tokens": completion_tokens,
            "cached_tokens": req.cached_tokens,
        }
        if style == "v0512":
            meta["reasoning_tokens"] = 0
        if finished:
            meta["e2e_latency"] = round((req.finished_at or time.monotonic()) - req.created, 6)
            if self.cfg.algorithm:
                meta |= self._spec_meta(req, style)
        return meta

    def _spec_meta(self, req: Request, style: str) -> dict[str, Any]:
        """Spec meta_info keys per version (reference §2.5)."""
        ct = req.verify_ct
        length = len(req.output_ids) / ct if ct else 0
        if style in ("v053", "v056"):  # zeros always present
            per_step = self.cfg.num_steps if style == "v053" else max(self.cfg.num_draft_tokens - 1, 1)
            out: dict[str, Any] = {
                "spec_accept_rate": req.accepted_drafts / (ct * per_step) if ct else 0.0,
                "spec_accept_length": length,
                "spec_verify_ct": ct,
            }
            if ct:
                out |= {"spec_accept_token_num": req.accepted_drafts, "spec_draft_token_num": ct * per_step}
            return out
        if not ct:
            return {}
        proposed = max(req.proposed_drafts, 1)
        if style == "v057":
            out = {
                "spec_accept_rate": req.accepted_drafts / proposed,
                "spec_accept_length": length,
                "spec_accept_token_num": req.accepted_drafts,
                "spec_draft_token_num": proposed,
                "spec_verify_ct": ct,
            }
        else:
            out = {
                "spec_accept_rate": req.accepted_drafts / proposed,
                "spec_accept_length": length,
                "spec_num_correct_drafts": req.accepted_drafts,
                "spec_num_proposed_drafts": proposed,
                "spec_verify_ct": ct,
            }
        key = self.ver.spec_histogram_key
        if key is not None:
            out[key] = list(req.drafts_histogram)
        return out

    def spec_tokens_details(self, req: Request) -> dict[str, Any] | None:
        """`sglext.spec_tokens_details` of a finished request on the OpenAI endpoints (SpecTokensDetails: the
        0.5.12+ meta_info fields, plus the DSpark ones, null for EAGLE), or None where there is none to give."""
        if not (self.cfg.algorithm and self.ver.spec_tokens_details and req.finished and req.verify_ct):
            return None
        details = self._spec_meta(req, "v0512")
        return {**details, "spec_cap_length": None, "spec_block_accept_length": None, "spec_cap_lens_histogram": None}
