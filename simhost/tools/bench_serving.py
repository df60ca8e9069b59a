"""Run SGLang's `bench_serving` unchanged from a venv without the server's GPU stack:
`VENV/bin/python simhost/tools/bench_serving.py ARGS...` is `python -m sglang.bench_serving ARGS...`.

From 0.5.14 or so the client lives in `sglang.benchmark.serving`, which imports one constant,
`FAKE_BOOTSTRAP_HOST` (the bootstrap host of a prefill/decode-disaggregated run), from
`sglang.srt.disaggregation.utils`, and that module pulls in the model loader, its CUDA kernels and `tvm_ffi`,
none of which a CPU-only venv can import. The constant is set here, as that module sets it, before the client is
imported; nothing else of the client is touched. Earlier versions (0.5.9) need none of this and run the same way.
Stdlib only: it runs on the venv's Python, never the project's.
"""

from __future__ import annotations

import runpy
import sys
import types

# What sglang.srt.disaggregation.utils sets it to (0.5.23).
FAKE_BOOTSTRAP_HOST = "2.2.2.2"


def main() -> None:
    # Harmless where the client never imports it (0.5.9's bench_serving imports nothing of sglang).
    stub = types.ModuleType("sglang.srt.disaggregation.utils")
    stub.FAKE_BOOTSTRAP_HOST = FAKE_BOOTSTRAP_HOST  # type: ignore[attr-defined]
    sys.modules[stub.__name__] = stub
    runpy.run_module("sglang.bench_serving", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
