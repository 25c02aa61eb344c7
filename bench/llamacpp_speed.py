"""Decoding speed of the toolbridge llama.cpp handler, in one run (prints figures, asserts nothing).

- plain text with tools present (`auto`, lazy grammar) vs the same request with no tools,
  and vs llama-cpp-python's stock handler for the model's template (no toolbridge at all);
- a forced call (`required`, strict grammar) vs unconstrained generation from (nearly) the
  same prompt (`auto`, which this model answers in text).

Each request is sent once to put its prompt in the KV cache, then timed `--rounds` times,
conditions interleaved so machine load hits them alike; the median is reported. Rate =
completion tokens / wall time of the request (prompt already cached: this is decoding).

    python bench/llamacpp_speed.py [--model X.gguf] [--rounds 5] [--max-tokens 128] [--threads 1]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import llama_cpp  # noqa: E402
from llama_cpp.llama_chat_format import get_chat_completion_handler  # noqa: E402

from llamacpp_ext import register  # noqa: E402
from llamacpp_ext.__main__ import default_model  # noqa: E402

# three tools of the accuracy bench: the prompt a small agent sends
_SPECS = json.loads((ROOT / "bench" / "accuracy" / "tools.json").read_text())
TOOLS = [{"type": "function", "function": {"name": n, **_SPECS[n]}} for n in ("get_weather", "search_web", "send_email")]
STORY = [{"role": "user", "content": "Write a long story about a dragon who learns to cook."}]
MEMORY = {"type": "function", "function": {
    "name": "create_entities", "description": "Create multiple new entities in the knowledge graph",
    "parameters": {"type": "object", "required": ["entities"], "additionalProperties": False, "properties": {
        "entities": {"type": "array", "items": {"type": "object", "additionalProperties": False,
                                                "required": ["name", "entityType", "observations"], "properties": {
                                                    "name": {"type": "string"}, "entityType": {"type": "string"},
                                                    "observations": {"type": "array", "items": {"type": "string"}}}}}}}}}
FACTS = [{"role": "user", "content": "Record these people in the knowledge graph: Ada Lovelace, a mathematician who "
                                      "wrote the first program; Alan Turing, who broke Enigma; Grace Hopper, who "
                                      "built the first compiler."}]


def _prompt_len(handler, common: dict, messages: list, tools: list | None = None) -> int:
    r = handler(**{**common, "messages": messages, "tools": tools, "max_tokens": 1})
    return r["usage"]["prompt_tokens"]


def _padding(handler, common: dict, target: int) -> str:
    """A system text that makes the no-tools prompt as long (in tokens) as the one with tools:
    decoding slows down with context length, which is not the handler's doing."""
    text = ""
    while _prompt_len(handler, common, [{"role": "system", "content": text + "Be kind. "}, *STORY]) <= target:
        text += "Be kind. "
    return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()

    register()
    llm = llama_cpp.Llama(args.model or default_model(), n_ctx=4096, n_threads=args.threads,
                          n_threads_batch=args.threads, logits_all=False, verbose=False)
    tb = get_chat_completion_handler("toolbridge")
    stock = llm._chat_handlers.get("chat_template.default")
    common = dict(llama=llm, max_tokens=args.max_tokens, temperature=0.7, seed=1, repeat_penalty=1.1)
    padded = [{"role": "system", "content": _padding(tb, common, _prompt_len(tb, common, STORY, TOOLS))}, *STORY]
    conditions = {
        "auto, tools present": (tb, dict(messages=STORY, tools=TOOLS, tool_choice="auto")),
        "no tools": (tb, dict(messages=STORY)),
        "no tools, prompt as long": (tb, dict(messages=padded)),
        "stock handler, no tools": (stock, dict(messages=STORY)),
        "forced call (required)": (tb, dict(messages=FACTS, tools=[MEMORY], tool_choice="required")),
        # the model answers this one in text (SmolLM2 does not call by itself): no grammar, nearly the same prompt
        "unconstrained (auto, text)": (tb, dict(messages=FACTS, tools=[MEMORY], tool_choice="auto")),
    }
    if stock is None:
        del conditions["stock handler, no tools"]

    samples: dict[str, list[tuple[int, float, str]]] = {name: [] for name in conditions}
    for name, (handler, kw) in conditions.items():  # warm-up: prompt into the cache
        handler(**common, **kw)
    names = list(conditions)
    for k in range(args.rounds):
        for name in names[k % len(names):] + names[:k % len(names)]:  # rotate the order each round
            handler, kw = conditions[name]
            handler(**{**common, **kw, "max_tokens": 1})  # this prompt into the cache
            t = time.perf_counter()
            r = handler(**common, **kw)
            dt = time.perf_counter() - t
            choice = r["choices"][0]
            kind = "call" if choice["message"].get("tool_calls") else "text"
            samples[name].append((r["usage"]["completion_tokens"], dt, kind))

    rate = {}
    print(f"model {Path(llm.model_path).name}, threads {args.threads}, max_tokens {args.max_tokens}, "
          f"{args.rounds} rounds (median)")
    for name, runs in samples.items():
        rates = [n / dt for n, dt, _ in runs]
        rate[name] = statistics.median(rates)
        tokens = statistics.median(n for n, _, _ in runs)
        kinds = ",".join(sorted({k for _, _, k in runs}))
        print(f"  {name:30s} {rate[name]:7.1f} tok/s   ({tokens:.0f} tokens, {kinds}; runs "
              f"{', '.join(f'{x:.0f}' for x in rates)})")
    print(f"auto with tools / no tools:          {rate['auto, tools present'] / rate['no tools']:6.1%}  (aim >= 95%)")
    print(f"auto with tools / no tools, prompt as long: "
          f"{rate['auto, tools present'] / rate['no tools, prompt as long']:6.1%}  (what the lazy grammar costs)")
    if "stock handler, no tools" in rate:
        print(f"toolbridge no tools / stock handler: {rate['no tools'] / rate['stock handler, no tools']:6.1%}")
    print(f"forced call / unconstrained:         "
          f"{rate['forced call (required)'] / rate['unconstrained (auto, text)']:6.1%}")


if __name__ == "__main__":
    main()
