"""`nvidia-smi` for the simulated GPUs, reading the memory registry (see simhost/gpu.py).

Supported: `--query-gpu=...`, `--query-compute-apps=...`, `--format=csv[,noheader][,nounits]`, `-i/--id`,
`-L/--list-gpus`, `--gpu-reset` (drops leaked entries), and the plain table with no arguments.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from simhost import gpu, knobs, telemetry

DRIVER = "580.159.04"
CUDA = "13.0"
VBIOS = "96.00.A5.00.1A"

# field -> (header, unit, value(index, used, total, state)); state: simhost.telemetry.gpu_states()[index]
GpuField = tuple[str, str, Callable[[int, int, int, dict[str, Any]], Any]]
GPU_FIELDS: dict[str, GpuField] = {
    "index": ("index", "", lambda i, u, t, s: i),
    "name": ("name", "", lambda i, u, t, s: knobs.get("SIMHOST_GPU_NAME")),
    "uuid": ("uuid", "", lambda i, u, t, s: gpu.gpu_uuid(i)),
    "pci.bus_id": ("pci.bus_id", "", lambda i, u, t, s: gpu.bus_id(i)),
    "driver_version": ("driver_version", "", lambda i, u, t, s: DRIVER),
    "vbios_version": ("vbios_version", "", lambda i, u, t, s: VBIOS),
    "count": ("count", "", lambda i, u, t, s: gpu.gpu_count()),
    "memory.total": ("memory.total", "MiB", lambda i, u, t, s: t),
    "memory.used": ("memory.used", "MiB", lambda i, u, t, s: u),
    "memory.free": ("memory.free", "MiB", lambda i, u, t, s: max(0, t - u)),
    "utilization.gpu": ("utilization.gpu", "%", lambda i, u, t, s: s["util"]),
    "utilization.memory": ("utilization.memory", "%", lambda i, u, t, s: s["mem_util"]),
    "temperature.gpu": ("temperature.gpu", "", lambda i, u, t, s: s["temperature"]),
    "power.draw": ("power.draw", "W", lambda i, u, t, s: f"{s['power']:.2f}"),
    "power.limit": ("power.limit", "W", lambda i, u, t, s: f"{s['power_limit']:.2f}"),
    "clocks.sm": ("clocks.current.sm", "MHz", lambda i, u, t, s: s["sm_mhz"]),
    "clocks.mem": ("clocks.current.memory", "MHz", lambda i, u, t, s: s["mem_mhz"]),
    "clocks.max.sm": ("clocks.max.sm", "MHz", lambda i, u, t, s: s["max_sm_mhz"]),
    # Renamed by the driver: asked by either name, the header says clocks_event_reasons (reference document).
    "clocks_event_reasons.active": ("clocks_event_reasons.active", "", lambda i, u, t, s: f"0x{s['reasons']:016x}"),
    "pstate": ("pstate", "", lambda i, u, t, s: s["pstate"]),
    "persistence_mode": ("persistence_mode", "", lambda i, u, t, s: "Enabled"),
    "compute_mode": ("compute_mode", "", lambda i, u, t, s: "Default"),
}
GPU_FIELDS["clocks.current.sm"] = GPU_FIELDS["clocks.sm"]
GPU_FIELDS["clocks.current.memory"] = GPU_FIELDS["clocks.memory"] = GPU_FIELDS["clocks.mem"]
GPU_FIELDS["clocks_throttle_reasons.active"] = GPU_FIELDS["clocks_event_reasons.active"]
GPU_FIELDS["gpu_name"] = GPU_FIELDS["name"]
GPU_FIELDS["gpu_uuid"] = GPU_FIELDS["uuid"]
GPU_FIELDS["gpu_bus_id"] = GPU_FIELDS["pci.bus_id"]

AppField = tuple[str, str, Callable[[dict[str, Any], int, int], Any]]
APP_FIELDS: dict[str, AppField] = {
    "pid": ("pid", "", lambda e, g, m: e["pid"]),
    "process_name": ("process_name", "", lambda e, g, m: e["name"]),
    "name": ("process_name", "", lambda e, g, m: e["name"]),
    "used_memory": ("used_gpu_memory", "MiB", lambda e, g, m: m),
    "used_gpu_memory": ("used_gpu_memory", "MiB", lambda e, g, m: m),
    "gpu_uuid": ("gpu_uuid", "", lambda e, g, m: gpu.gpu_uuid(g)),
    "gpu_bus_id": ("gpu_bus_id", "", lambda e, g, m: gpu.bus_id(g)),
    "gpu_name": ("gpu_name", "", lambda e, g, m: knobs.get("SIMHOST_GPU_NAME")),
    "gpu_serial": ("gpu_serial", "", lambda e, g, m: f"165{g:010d}"),
}


def _csv(headers: list[tuple[str, str]], rows: list[list[Any]], fmt: set[str]) -> str:
    lines = []
    units = "nounits" not in fmt
    if "noheader" not in fmt:
        lines.append(", ".join(f"{h} [{u}]" if u else h for h, u in headers))
    for row in rows:
        cells = [f"{v} {u}" if u and units else str(v) for v, (_, u) in zip(row, headers, strict=True)]
        lines.append(", ".join(cells))
    return "".join(line + "\n" for line in lines)


def _select(ids: str | None) -> list[int]:
    all_ids = list(range(gpu.gpu_count()))
    if not ids:
        return all_ids
    chosen = []
    for part in ids.split(","):
        if not part.strip().isdigit() or int(part) not in all_ids:
            raise SystemExit(f'No devices were found with the given id "{part}"')  # exit code 1
        chosen.append(int(part))
    return chosen


def _table(indices: list[int]) -> str:
    used = gpu.used_mib()
    total = knobs.gpu_memory_mib()
    name = knobs.get("SIMHOST_GPU_NAME")
    bar = "+-----------------------------------------------------------------------------------------+"
    sep = "|=========================================+========================+======================|"
    out = [
        time.strftime("%a %b %d %H:%M:%S %Y"),
        bar,
        f"| NVIDIA-SMI {DRIVER}             Driver Version: {DRIVER}     CUDA Version: {CUDA}     |",
        "|-----------------------------------------+------------------------+----------------------+",
        "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
        "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |",
        "|                                         |                        |               MIG M. |",
        sep,
    ]
    for i in indices:
        u = used.get(i, 0)
        mem = f"{u}MiB / {total}MiB"
        out.append(f"| {i:>3}  {name:<20}           On  |   {gpu.bus_id(i)} Off |                    0 |")
        out.append(
            f"| N/A   {35 if u else 31}C    P0            {119 if u else 76}W /  700W | {mem:>22} |"
            "      0%      Default |"
        )
        out.append("|                                         |                        |             Disabled |")
        out.append("+-----------------------------------------+------------------------+----------------------+")
    out += [
        "",
        bar,
        "| Processes:" + " " * 78 + "|",
        "|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |",
        "|        ID   ID                                                               Usage      |",
        "|" + "=" * 89 + "|",
    ]
    apps = [(g, e, m) for e in gpu.entries() for g, m in _memory(e) if g in indices]
    if not apps:
        out.append("|  No running processes found" + " " * 61 + "|")
    for g, e, m in sorted(apps, key=lambda a: (a[0], a[1]["pid"])):
        out.append(f"| {g:>4}   N/A  N/A  {e['pid']:>15}      C   {e['name'][:34]:<34} {m:>8}MiB |")
    out.append(bar)
    return "\n".join(out) + "\n"


def _memory(entry: dict[str, Any]) -> list[tuple[int, int]]:
    return [(int(g), int(m)) for g, m in sorted(entry["memory_mib"].items(), key=lambda kv: int(kv[0]))]


def main(argv: list[str]) -> int:
    opts: dict[str, str] = {}
    it = iter(argv)
    for arg in it:
        if arg in ("-i", "--id", "-f", "--filename"):
            opts[arg.lstrip("-")[:1]] = next(it, "")
        elif arg in ("-l", "--loop", "-lms", "--loop-ms"):
            opts["loop_ms"] = next(it, "")
            if not opts["loop_ms"].isdigit():
                sys.stderr.write("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n")
                return 2
            opts["loop_ms"] = str(int(opts["loop_ms"]) * (1 if "ms" in arg else 1000))
        elif arg.startswith("--") and "=" in arg:
            key, value = arg[2:].split("=", 1)
            opts["i" if key == "id" else key] = value
        elif arg in ("-L", "--list-gpus", "--gpu-reset", "-r", "-h", "--help"):
            opts[arg] = ""
        else:
            sys.stderr.write("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n")
            return 2
    if "-h" in opts or "--help" in opts:
        sys.stdout.write(__doc__ or "")
        return 0
    try:
        indices = _select(opts.get("i"))
    except SystemExit as exc:
        sys.stdout.write(f"{exc}\n")
        return 6
    if "--gpu-reset" in opts or "-r" in opts:
        released = gpu.reset()
        for i in indices:
            sys.stdout.write(f"GPU {gpu.bus_id(i)} was successfully reset.\n")
        sys.stdout.write(f"({released} leaked allocation(s) released)\n" if released else "")
        return 0
    if "-L" in opts or "--list-gpus" in opts:
        name = knobs.get("SIMHOST_GPU_NAME")
        sys.stdout.write("".join(f"GPU {i}: {name} (UUID: {gpu.gpu_uuid(i)})\n" for i in indices))
        return 0
    fmt = set(opts.get("format", "").split(","))
    if "query-gpu" in opts or "query-compute-apps" in opts:
        if "csv" not in fmt:
            sys.stdout.write('"--format" option must be specified along with the query option.\n')
            return 2
        kind = "query-gpu" if "query-gpu" in opts else "query-compute-apps"
        names = [n.strip() for n in opts[kind].split(",") if n.strip()]
        table: dict[str, Any] = GPU_FIELDS if kind == "query-gpu" else APP_FIELDS
        for n in names:
            if n not in table:
                sys.stdout.write(f'Field "{n}" is not a valid field to query.\n\n')
                return 2
        headers = [table[n][:2] for n in names]
        loop_ms = int(opts.get("loop_ms") or 0)
        while True:
            try:
                sys.stdout.write(_query(kind, table, names, headers, indices, fmt))
                sys.stdout.flush()
            except BrokenPipeError:
                return 0  # the reader went away (a closed SSH channel): what ends a real loop too
            if not loop_ms:
                return 0
            fmt.add("noheader")  # the header comes once
            time.sleep(loop_ms / 1000)
    sys.stdout.write(_table(indices))
    return 0


def _query(
    kind: str, table: dict[str, Any], names: list[str], headers: list[Any], indices: list[int], fmt: set[str]
) -> str:
    rows: list[list[Any]] = []
    if kind == "query-gpu":
        used = gpu.used_mib()
        total = knobs.gpu_memory_mib()
        states = telemetry.gpu_states(used)
        rows = [[table[n][2](i, used.get(i, 0), total, states[i]) for n in names] for i in indices]
    else:
        apps = [(g, entry, m) for entry in gpu.entries() for g, m in _memory(entry) if g in indices]
        apps.sort(key=lambda a: (a[0], a[1]["pid"]))
        rows = [[table[n][2](entry, g, m) for n in names] for g, entry, m in apps]
    return _csv(headers, rows, fmt)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
