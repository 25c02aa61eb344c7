"""Where a server's resident memory is: its mappings from /proc/PID/smaps grouped by kind, and how many
threads and glibc thread arenas it has; once, or every N seconds as JSON lines.

    python bench/memory_map.py PID [--every 30] [--out FILE]

Kinds: the model file (a mapped GGUF), other files (libraries), the main heap (glibc's main arena),
glibc's per-thread arenas (anonymous 64 MiB-aligned reservations), other anonymous memory (llama.cpp's
KV cache and compute buffers, numpy arrays, large allocations), stacks. Linux only.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

ARENA = 64 << 20  # glibc's per-thread heaps: HEAP_MAX_SIZE on 64-bit, aligned to their size
_MAP = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) (\S+) \S+ \S+ \S+\s*(.*)$")


def mappings(pid: int) -> list[tuple[int, int, str, int]]:
    """(start, end, name, resident KiB) of each mapping."""
    out: list[list] = []
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        m = _MAP.match(line)
        if m:
            out.append([int(m.group(1), 16), int(m.group(2), 16), m.group(4).strip(), 0])
        elif line.startswith("Rss:") and out:
            out[-1][3] = int(line.split()[1])
    return [tuple(m) for m in out]


def kind(start: int, end: int, name: str, anon_ends: dict[int, int]) -> str:
    if name == "[heap]":
        return "main heap"
    if name.startswith("[stack"):
        return "stacks"
    if name.startswith("["):
        return "kernel"
    if name.endswith(".gguf"):
        return "model file"
    if name:
        return "other files"
    # a thread arena: 64 MiB-aligned, its used part followed by its reserved (PROT_NONE) rest
    if start % ARENA == 0 and (end - start == ARENA or anon_ends.get(end) == start + ARENA):
        return "thread arenas"
    return "other anonymous"


def snapshot(pid: int) -> dict:
    maps = mappings(pid)
    anon_ends = {s: e for s, e, n, _ in maps if not n}
    mib: dict[str, float] = {}
    arenas = 0
    for s, e, n, rss in maps:
        k = kind(s, e, n, anon_ends)
        arenas += k == "thread arenas"  # an arena's used part only: its reserved rest is not aligned
        mib[k] = mib.get(k, 0.0) + rss / 1024
    status = Path(f"/proc/{pid}/status").read_text()
    threads = int(re.search(r"Threads:\s+(\d+)", status).group(1))
    return {"rss_mib": round(sum(mib.values()), 1), "threads": threads, "thread_arenas": arenas,
            **{k: round(v, 1) for k, v in sorted(mib.items())}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pid", type=int)
    ap.add_argument("--every", type=float, help="seconds between snapshots (default: one snapshot)")
    ap.add_argument("--out", help="append JSON lines here (default: standard output)")
    a = ap.parse_args(argv)
    out = open(a.out, "a") if a.out else sys.stdout
    begun = time.monotonic()
    try:
        while Path(f"/proc/{a.pid}").exists():
            try:
                snap = snapshot(a.pid)
            except OSError:
                break
            out.write(json.dumps({"t": round(time.monotonic() - begun), **snap}) + "\n")
            out.flush()
            if not a.every:
                break
            time.sleep(a.every)
    finally:
        if a.out:
            out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
