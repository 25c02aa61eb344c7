"""bench/memory_map.py: a process's resident memory by kind (Linux /proc), as the memory paragraph of
docs/measurements.md reads a server's."""
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.memory_map import ARENA, kind, snapshot

pytestmark = pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="needs Linux /proc")


def test_each_mapping_gets_its_kind():
    base = 7 * ARENA
    anon_ends = {base: base + (4 << 20), base + (4 << 20): base + ARENA}  # an arena: used part, then reserved rest
    assert kind(base, base + (4 << 20), "", anon_ends) == "thread arenas"
    assert kind(base + 4096, base + (8 << 20), "", {}) == "other anonymous"  # not aligned: a large allocation
    assert kind(0, 4096, "[heap]", {}) == "main heap"
    assert kind(0, 4096, "/m/SmolLM2.Q4_1.gguf", {}) == "model file"
    assert kind(0, 4096, "/usr/lib/libc.so.6", {}) == "other files"


def test_threads_that_allocate_show_as_arenas():
    code = ("import threading, time\nkeep = []\n"
            "def work():\n    keep.append([bytearray(2048) for _ in range(4000)]); time.sleep(4)\n"
            "ts = [threading.Thread(target=work) for _ in range(4)]\n[t.start() for t in ts]\n[t.join() for t in ts]\n")
    child = subprocess.Popen([sys.executable, "-c", code])
    try:
        time.sleep(2)
        snap = snapshot(child.pid)
    finally:
        child.wait(timeout=30)
    assert snap["threads"] >= 5 and snap["thread_arenas"] >= 1 and snap.get("thread arenas", 0) > 16  # 4 x 8 MiB of malloc-sized objects
    assert abs(snap["rss_mib"] - sum(v for k, v in snap.items() if isinstance(v, float) and k != "rss_mib")) < 1
