"""The SGLang version whose formats simhost imitates: `SIMHOST_SGLANG_VERSION` (default 0.5.9).

Three eras (reference §0): A "classic-dot" (<= 0.5.3), B "classic-comma" (0.5.4 - 0.5.12), C "arg-groups"
(0.5.14+). Every format that changed between versions is decided here, from the version tuple, so the rest of
simhost asks questions ("does the Prefill line end with `, `?") instead of comparing versions itself.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

DEFAULT = "0.5.9"
# The versions the reference was read from (0.5.x; `.postN` suffixes are accepted and ignored).
SUPPORTED = (
    "0.5.3", "0.5.4", "0.5.5", "0.5.6", "0.5.7", "0.5.8", "0.5.9", "0.5.10", "0.5.12", "0.5.14", "0.5.16",
    "0.5.18", "0.5.20", "0.5.23",
)  # fmt: skip
# The newest profile: what the demo's host runs, so that every feature specdash offers is served there (the default
# stays older, as the tests of the older formats were written against it).
NEWEST = max(SUPPORTED, key=lambda text: tuple(int(part) for part in text.split(".")))


class UnknownVersion(ValueError):
    pass


@dataclass(frozen=True)
class Version:
    text: str  # as reported in /server_info "version"
    v: tuple[int, int, int]

    @classmethod
    def parse(cls, text: str) -> Version:
        match = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)(?:\.post\d+)?", text.strip())
        base = ".".join(match.groups()) if match else ""
        if base not in SUPPORTED:
            raise UnknownVersion(
                f"SIMHOST_SGLANG_VERSION={text!r} is not a simulated SGLang version; supported: "
                f"{', '.join(SUPPORTED)} (optionally with a .postN suffix)"
            )
        a, b, c = (int(x) for x in base.split("."))
        return cls(text.strip(), (a, b, c))

    def at_least(self, text: str) -> bool:
        return self.v >= tuple(int(x) for x in text.split("."))

    # -- eras
    @property
    def era(self) -> str:
        if not self.at_least("0.5.4"):
            return "A"
        return "B" if not self.at_least("0.5.14") else "C"

    # -- command line (reference §1.2-1.4)
    @property
    def arg_groups(self) -> bool:
        """Era C: --cuda-graph-max-bs-decode & co., deprecated --disable-cuda-graph, free-string algorithm."""
        return self.era == "C"

    @property
    def cuda_graph_max_bs_flag(self) -> str:
        """'plain' (<= 0.5.12), 'deprecated' (0.5.14 - 0.5.18) or 'removed' (0.5.20+: ambiguous prefix, exit 2)."""
        if not self.arg_groups:
            return "plain"
        return "deprecated" if not self.at_least("0.5.20") else "removed"

    @property
    def beta_spec_flag(self) -> bool:
        """0.5.3 only: `--enable-beta-spec` instead of SGLANG_ENABLE_SPEC_V2."""
        return self.v == (0, 5, 3)

    @property
    def warns_max_running_reset(self) -> bool:
        return self.at_least("0.5.4")

    @property
    def timestamped_arg_warnings(self) -> bool:
        """From 0.5.12 prepare_server_args configures logging first; before, the warnings are printed bare."""
        return self.at_least("0.5.12")

    @property
    def server_args_dump(self) -> str:
        """'repr' (server_args=ServerArgs(...), <= 0.5.18) or 'dict' (server_args={...}, 0.5.20+)."""
        return "repr" if not self.at_least("0.5.20") else "dict"

    # -- startup lines (reference §3.2 table)
    @property
    def init_line(self) -> str:
        """'plain' (<= 0.5.8), 'elapsed' (0.5.9 - 0.5.20) or 'none' (0.5.23)."""
        if not self.at_least("0.5.9"):
            return "plain"
        return "elapsed" if not self.at_least("0.5.22") else "none"

    @property
    def weight_end_elapsed(self) -> bool:
        return self.at_least("0.5.9")

    @property
    def weight_end_dtype(self) -> bool:
        """0.5.10 dropped `dtype=` (and may add `quant=..., fmt=...`)."""
        return not self.at_least("0.5.10")

    @property
    def kv_line_dtype(self) -> bool:
        return self.at_least("0.5.14")

    @property
    def capture_style(self) -> str:
        """'classic' (<= 0.5.12), 'c14' (num_tokens_per_bs), 'c16' (num_tokens_per_req, 0.5.16 - 0.5.20),
        'c22' (0.5.22+: the target's bs list moves to the end line)."""
        if not self.arg_groups:
            return "classic"
        if not self.at_least("0.5.16"):
            return "c14"
        return "c16" if not self.at_least("0.5.22") else "c22"

    # -- runtime lines (reference §3.3, §3.4, §6)
    @property
    def batch_separator(self) -> str:
        return ". " if self.era == "A" else ", "

    @property
    def prefill_tail(self) -> str:
        """'comma' (<= 0.5.8: ends `#queue-req: q, `), 'v059', 'v0510', 'pending' (0.5.12+)."""
        if not self.at_least("0.5.9"):
            return "comma"
        if self.v == (0, 5, 9):
            return "v059"
        return "v0510" if not self.at_least("0.5.12") else "pending"

    @property
    def decode_trailing_comma(self) -> bool:
        return not self.at_least("0.5.9")

    def accept_rate(self, accepted: int, forward_ct: int, num_steps: int, num_draft_tokens: int) -> float:
        """The Decode line's accept rate; `accepted` counts accepted drafts + 1 bonus per request per step."""
        if not forward_ct:
            return 0.0
        if not self.at_least("0.5.4"):
            return accepted / (forward_ct * (num_steps + 1))
        if not self.at_least("0.5.12"):
            return accepted / (forward_ct * num_draft_tokens)
        return (accepted - forward_ct) / (forward_ct * max(num_draft_tokens - 1, 1))

    # -- HTTP (reference §2)
    @property
    def new_info_endpoints(self) -> bool:
        """/model_info and /server_info exist (and the /get_* aliases log a deprecation) from 0.5.6."""
        return self.at_least("0.5.6")

    @property
    def ready_endpoint(self) -> bool:
        return self.at_least("0.5.20")

    @property
    def meta_style(self) -> str:
        """Spec meta_info keys: 'v053' (zeros always, rate over num_steps), 'v056' (zeros always, rate over
        draft-1), 'v057' (only when verified; 0.5.9 shape), 'v0512' (correct/proposed drafts)."""
        if not self.at_least("0.5.6"):
            return "v053"
        if not self.at_least("0.5.7"):
            return "v056"
        return "v057" if not self.at_least("0.5.12") else "v0512"

    @property
    def spec_histogram_key(self) -> str | None:
        """The meta_info key of a request's accepted-drafts histogram (index i: verify steps that accepted exactly i
        drafts), or None: `spec_accept_histogram` in 0.5.9 - 0.5.10 (reference §2.5 lists it as optional for
        0.5.7 - 0.5.10; it came with sglang#18332, merged 2026-02-06, between 0.5.8.post1 and 0.5.9),
        `spec_correct_drafts_histogram` from 0.5.12."""
        if not self.at_least("0.5.9"):
            return None
        return "spec_accept_histogram" if not self.at_least("0.5.12") else "spec_correct_drafts_histogram"

    @property
    def spec_tokens_details(self) -> bool:
        """The OpenAI endpoints answer `return_spec_tokens_details` with `sglext.spec_tokens_details` (0.5.23, the
        version the reference read it from; earlier ones ignore the field)."""
        return self.at_least("0.5.23")

    @property
    def simulate_acc_default_method(self) -> str:
        """SGLANG_SIMULATE_ACC_METHOD's default: `match-expected` in 0.5.23 (reference d4), `multinomial` in the older
        envs tables. The version that switched is not in the reference; simhost switches at 0.5.23."""
        return "match-expected" if self.at_least("0.5.23") else "multinomial"

    @property
    def spec_step_gauges(self) -> bool:
        """sglang:spec_num_steps and sglang:spec_num_draft_tokens on /metrics (0.5.23 adds them, reference §2.8)."""
        return self.at_least("0.5.23")

    @property
    def health_rid_uuid(self) -> bool:
        return self.at_least("0.5.14")

    # -- failures (reference §4)
    @property
    def logs_kill_process_tree(self) -> bool:
        return self.at_least("0.5.23")


def current(env: Mapping[str, str] | None = None) -> Version:
    env = os.environ if env is None else env
    return Version.parse(env.get("SIMHOST_SGLANG_VERSION") or DEFAULT)
