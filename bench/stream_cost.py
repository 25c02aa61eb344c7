"""Streaming parser cost per token for one long tool call (issue: amortized O(1) per character).

Prints microseconds per token for calls of 1k, 4k, 16k and 40k tokens and the ratio of the
largest to the smallest. Tokens are ~4-character pieces of the text (a tokenizer's average);
the figures are best-of-N to damp noise from the shared machine.

    python bench/stream_cost.py
"""
from __future__ import annotations

import json
import random
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from toolbridge.parsing.stream import StreamParser  # noqa: E402

TOOLS = [{"type": "function", "function": {"name": "write_file", "parameters": {
    "type": "object", "required": ["path", "content"],
    "properties": {"path": {"type": "string"}, "content": {"type": "string"},
                   "rows": {"type": "array", "items": {"type": "object", "properties": {
                       "id": {"type": "integer"}, "name": {"type": "string"}, "score": {"type": "number"},
                       "ok": {"type": "boolean"}}}}}}}}]
WORDS = "the quick brown fox jumps over a lazy dog while \"quoted\" text, tabs\tand\nnew lines pass by".split(" ")


def long_call(tokens: int, seed: int = 0) -> str:
    """A `<tool_call>` whose arguments hold prose and structured rows, about `tokens` tokens long."""
    rnd = random.Random(seed)
    target = tokens * 4
    content, rows, size = [], [], 0
    while size < target * 0.6:
        w = rnd.choice(WORDS)
        content.append(w)
        size += len(w) + 1
    while size < target:
        row = {"id": len(rows), "name": rnd.choice(WORDS), "score": round(rnd.random() * 100, 3), "ok": rnd.random() > .5}
        rows.append(row)
        size += len(json.dumps(row)) + 2
    args = {"path": "notes/out.txt", "content": " ".join(content), "rows": rows}
    return "Writing it now.\n<tool_call>\n" + json.dumps({"name": "write_file", "arguments": args}) + "\n</tool_call>"


def pieces(text: str) -> list[str]:
    return re.findall(r".{1,4}", text, flags=re.S)


def run(deltas: list[str]) -> float:
    p = StreamParser(TOOLS)
    t0 = time.perf_counter()
    for d in deltas:
        p.feed(d)
    p.finish()
    return time.perf_counter() - t0


def main() -> None:
    print(f"{'tokens':>8} {'chars':>9} {'us/token':>9}")
    per = {}
    for n in (1_000, 4_000, 16_000, 40_000):
        deltas = pieces(long_call(n))
        best = min(run(deltas) for _ in range(max(3, 40_000 // n)))
        per[n] = best / len(deltas) * 1e6
        print(f"{len(deltas):>8} {sum(map(len, deltas)):>9} {per[n]:>9.2f}")
    print(f"ratio 40k/1k per-token cost: {per[40_000] / per[1_000]:.2f}")


if __name__ == "__main__":
    main()
