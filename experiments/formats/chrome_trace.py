"""Chrome-trace JSON in (what torch.profiler's export writes and SGLang's /start_profile leaves per rank), bounded:
a gzipped or plain file becomes its list of events, or a TraceError saying why not."""

from __future__ import annotations

import gzip
import io
import json
import zlib
from typing import Any

# A trace is read whole; these bound what one file may cost the reader however it was made.
DEFAULT_MAX_JSON_BYTES = 256 * 1024 * 1024
DEFAULT_MAX_EVENTS = 3_000_000


class TraceError(ValueError):
    """The bytes are not a trace this reader takes (not JSON, too large, no events); the message says which."""


def decompressed(data: bytes, max_bytes: int = DEFAULT_MAX_JSON_BYTES) -> bytes:
    """The JSON text of a trace file, gunzipped when it is gzip; refuses more than `max_bytes` of it."""
    if data[:2] != b"\x1f\x8b":
        if len(data) > max_bytes:
            raise TraceError(f"The trace is {len(data)} bytes of JSON, over the {max_bytes}-byte limit.")
        return data
    out = io.BytesIO()
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as stream:
            while chunk := stream.read(1024 * 1024):
                out.write(chunk)
                if out.tell() > max_bytes:
                    raise TraceError(f"The trace unpacks to over {max_bytes} bytes of JSON; refused.")
    except (OSError, EOFError, zlib.error) as exc:
        raise TraceError(f"The trace is not a readable gzip file: {exc}") from exc
    return out.getvalue()


def events(data: bytes, *, max_bytes: int = DEFAULT_MAX_JSON_BYTES, max_events: int = DEFAULT_MAX_EVENTS) -> list:
    """The trace's events: `traceEvents` of the object form, or the array form's items. Only dicts are kept."""
    try:
        parsed: Any = json.loads(decompressed(data, max_bytes))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TraceError(f"The trace is not JSON: {exc}") from exc
    found = parsed.get("traceEvents") if isinstance(parsed, dict) else parsed
    if not isinstance(found, list):
        raise TraceError("The trace has no traceEvents list.")
    if len(found) > max_events:
        raise TraceError(f"The trace holds {len(found)} events, over the {max_events}-event limit.")
    return [e for e in found if isinstance(e, dict)]
