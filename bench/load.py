"""Concurrent streaming load against any OpenAI-compatible server: figures, no assertions.

N streams start together (a barrier), each with the same tool set (or none, for the
comparison); with tools, every other stream has tool_choice "required" with parallel_tool_calls
false (it must make one call) and the rest "auto" (asking for text or for a tool, as a
conversation does). Per stream: whether it
completed, its calls (checked against their schemas with jsonschema), time to first chunk, the
longest gap between chunks, completion tokens. A stream cut by max_tokens
(finish_reason "length") may end inside a call: that last call is not counted, as a
non-streamed answer would not return it. Overall: wall time and output tokens per second.

    python bench/load.py --base-url http://127.0.0.1:8000/v1 --model smol [--streams 16] [--tools 50]

tests/servers.py (check_load) runs it against both toolbridge servers.
"""
from __future__ import annotations

import argparse
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import jsonschema
import openai

ROOT = Path(__file__).resolve().parent.parent
ASKS = ["What is the weather in Paris?", "Write two sentences about the sea.",
        "Convert 20 US dollars to euros.", "Tell me a short story about a robot.",
        "Search the web for the latest news about electric cars.", "Say hello in French and Spanish.",
        "Set a reminder to call mom at 6pm.", "What is a haiku? Answer briefly."]


def load_tools(n: int) -> list[dict]:
    """n real tool schemas: the accuracy bench's 16 everyday tools, then the grammar corpus."""
    everyday = json.loads((ROOT / "bench" / "accuracy" / "tools.json").read_text())
    corpus = json.loads((ROOT / "tests" / "data" / "tool_schemas.json").read_text())
    specs = [{"name": k, **v} for k, v in everyday.items()] + corpus
    seen, out = set(), []
    for t in specs:
        if t["name"] not in seen and len(out) < n:
            seen.add(t["name"])
            out.append({"type": "function", "function": {k: t[k] for k in ("name", "description", "parameters")
                                                          if k in t}})
    return out


@dataclass
class Stream:
    ask: str
    done: bool = False
    error: str = ""
    first_chunk: float = 0.0  # seconds after the start
    longest_gap: float = 0.0  # between chunks, after the first
    tokens: int = 0
    decode_time: float = 0.0  # from the first chunk to the last
    calls: list = field(default_factory=list)  # (name, arguments)
    invalid: list = field(default_factory=list)
    content: str = ""
    finish: str | None = None


def run(base_url: str, model: str, streams: int = 16, tools: list[dict] | None = None, max_tokens: int = 64,
        timeout: float = 600) -> dict:
    client = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=timeout)
    schemas = {t["function"]["name"]: t["function"].get("parameters", {}) for t in tools or []}
    barrier = threading.Barrier(streams)
    start = [0.0]

    def one(i: int) -> Stream:
        s = Stream(ASKS[i % len(ASKS)])
        kw = {}
        if tools:
            kw = {"tools": tools, "tool_choice": "auto"}
            if i % 2 == 0:
                kw.update(tool_choice="required", parallel_tool_calls=False)
        barrier.wait()
        if i == 0:
            start[0] = time.perf_counter()
        t0 = time.perf_counter()
        last, parts = None, {}
        try:
            for chunk in client.chat.completions.create(
                    model=model, messages=[{"role": "user", "content": s.ask}], stream=True, temperature=0,
                    max_tokens=max_tokens, stream_options={"include_usage": True}, **kw):
                now = time.perf_counter()
                if last is None:
                    s.first_chunk = now - t0
                else:
                    s.longest_gap = max(s.longest_gap, now - last)
                last = now
                if chunk.usage is not None:
                    s.tokens = chunk.usage.completion_tokens
                for ch in chunk.choices:
                    s.finish = ch.finish_reason or s.finish
                    s.content += ch.delta.content or ""
                    for tc in ch.delta.tool_calls or []:
                        slot = parts.setdefault(tc.index, ["", ""])
                        slot[0] += (tc.function.name or "") if tc.function else ""
                        slot[1] += (tc.function.arguments or "") if tc.function else ""
            s.done = True
            s.decode_time = (last - t0 - s.first_chunk) if last is not None else 0.0
        except Exception as e:  # reported per stream
            s.error = f"{type(e).__name__}: {e}"
        if s.finish == "length" and parts:
            parts.pop(max(parts))
        for name, args in parts.values():
            s.calls.append((name, args))
            try:
                jsonschema.validate(json.loads(args), schemas[name])
            except Exception as e:  # noqa: BLE001 - any failure is an invalid call
                s.invalid.append((name, args, str(e)[:200]))
        return s

    t = time.perf_counter()
    with ThreadPoolExecutor(streams) as pool:
        results = list(pool.map(one, range(streams)))
    wall = time.perf_counter() - t
    tokens = sum(s.tokens for s in results)
    rates = [s.tokens / s.decode_time for s in results if s.decode_time > 0 and s.tokens > 1]
    return {"streams": results, "wall": wall, "tokens": tokens, "tokens_per_s": tokens / wall,
            "stream_tokens_per_s": sum(rates) / len(rates) if rates else 0.0,
            "completed": sum(s.done for s in results), "calls": sum(len(s.calls) for s in results),
            "invalid": sum(len(s.invalid) for s in results),
            "longest_gap": max(s.longest_gap for s in results),
            "longest_first_chunk": max(s.first_chunk for s in results)}


def summary(label: str, r: dict) -> str:
    return (f"{label}: {r['completed']}/{len(r['streams'])} streams completed, {r['calls']} calls "
            f"({r['invalid']} invalid), {r['tokens']} tokens in {r['wall']:.1f} s = {r['tokens_per_s']:.1f} tok/s "
            f"(per stream, from its first chunk: {r['stream_tokens_per_s']:.1f} tok/s); "
            f"longest gap between chunks {r['longest_gap']:.2f} s, longest time to first chunk "
            f"{r['longest_first_chunk']:.1f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--streams", type=int, default=16)
    ap.add_argument("--tools", type=int, default=50)
    ap.add_argument("--max-tokens", type=int, default=64)
    args = ap.parse_args()
    with_tools = run(args.base_url, args.model, args.streams, load_tools(args.tools), args.max_tokens)
    without = run(args.base_url, args.model, args.streams, None, args.max_tokens)
    print(summary(f"{args.tools} tools", with_tools))
    print(summary("no tools", without))
    print(f"output tokens/s with tools / without: {with_tools['tokens_per_s'] / without['tokens_per_s']:.1%}")


if __name__ == "__main__":
    main()
