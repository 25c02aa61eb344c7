"""Per-request overhead of toolbridge with 1, 10, 50 and 128 real tool schemas, on both engines.

Prints figures, asserts nothing. The tools are github-mcp-server's 117 (bench/data, as the server
lists them) followed by the grammar corpus (tests/data/tool_schemas.json), names unique. "first"
is a tool set the process has never seen (each trial renames the tools, so nothing is cached);
"repeated" sends the same tool set again, as an agent does on every turn. Medians.

- vLLM: the tool parser's adjust_request, the hook that runs on the API server's event loop, on a
  request parsed by vLLM's own request model; and vLLM's own validation of the structural tag it
  then gets (an xgrammar conversion, on the same event loop), which the plugin memoizes. "content
  check" is the floor of any cache keyed by content: reading the request's tools and comparing them
  with the cached set's, which a repeated request cannot skip.
- llama.cpp: the handler's work before the first token (checks, grammar and its compile check,
  prompt rendering, tokenization).
- the prompt tokens the tool list adds, per tool (SmolLM2's tokenizer, the packaged chatml prelude).

    python bench/request_overhead.py [--repeats 30] [--first 3]
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

SIZES = (1, 10, 50, 128)
QUESTION = [{"role": "user", "content": "List the open pull requests of octocat/hello-world."}]


def tool_pool() -> list[dict]:
    github = json.loads((ROOT / "bench" / "data" / "github_mcp_tools.json").read_text())["tools"]
    corpus = json.loads((ROOT / "tests" / "data" / "tool_schemas.json").read_text())
    seen, pool = set(), []
    for t in github + corpus:
        if t["name"] not in seen:
            seen.add(t["name"])
            pool.append({"type": "function", "function": {k: t[k] for k in ("name", "description", "parameters")}})
    return pool


def renamed(tools: list[dict], trial: int) -> list[dict]:
    """The same tools under new names: a tool set no cache has seen."""
    return [{"type": "function", "function": {**t["function"], "name": f"{t['function']['name'][:56]}_t{trial}"}}
            for t in tools]


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1e3


def vllm_figures(pool: list[dict], repeats: int, firsts: int) -> dict:
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.sampling_params import SamplingParams, StructuredOutputsParams
    from vllm.v1.structured_output import backend_xgrammar
    from transformers import AutoTokenizer

    from toolbridge.request import toolset
    from vllm_plugin import ToolbridgeToolParser
    from toolbridge.serving.models import hf_copy

    tokenizer = AutoTokenizer.from_pretrained(hf_copy())
    out = {}
    for n in SIZES:
        def request(tools: list[dict]):
            return ChatCompletionRequest.model_validate_json(json.dumps({"model": "m", "messages": QUESTION,
                                                                         "tools": tools}))

        def adjust(req) -> float:
            t = time.perf_counter()
            ToolbridgeToolParser(tokenizer).adjust_request(req)
            return time.perf_counter() - t

        def content_check(req) -> float:
            # the floor of any content-keyed cache: toolset() reading the request's tools and
            # finding the set they equal
            t = time.perf_counter()
            found = toolset(req.tools)
            elapsed = time.perf_counter() - t
            assert found is cached
            return elapsed

        def validate(req) -> float:
            sp = SamplingParams(structured_outputs=StructuredOutputsParams(
                structural_tag=req.structured_outputs.structural_tag))
            t = time.perf_counter()
            backend_xgrammar.validate_xgrammar_grammar(sp)
            return time.perf_counter() - t

        first, first_validate = [], []
        for trial in range(firsts):
            req = request(renamed(pool[:n], trial))
            first.append(adjust(req))
            first_validate.append(validate(req))
        same = pool[:n]
        adjust(request(same))
        cached = toolset(request(same).tools)
        reqs = [request(same) for _ in range(repeats)]
        repeated = [adjust(r) for r in reqs]
        check = [content_check(r) for r in reqs]
        repeated_validate = [validate(r) for r in reqs]
        out[n] = {"adjust_first": median_ms(first), "adjust_repeated": median_ms(repeated),
                  "content_check": median_ms(check),
                  "validate_first": median_ms(first_validate), "validate_repeated": median_ms(repeated_validate)}
    return out


def llamacpp_figures(pool: list[dict], repeats: int, firsts: int) -> tuple[dict, dict]:
    import llama_cpp

    from llamacpp_ext.__main__ import default_model
    from llamacpp_ext.handler import prepare_answer

    llama = llama_cpp.Llama(default_model(), n_ctx=65536, n_threads=1, n_threads_batch=1, logits_all=False,
                            verbose=False)
    options = {"tb_template": "chatml"}

    def prepare(tools: list[dict], choice: str = "auto"):
        t = time.perf_counter()
        p = prepare_answer(llama, messages=QUESTION, tools=tools, tool_choice=choice, functions=None,
                           function_call=None, parallel_tool_calls=None, stop=None, grammar=None,
                           response_format=None, logit_bias=None, options=options)
        return time.perf_counter() - t, p

    out, tokens = {}, {}
    base = len(prepare([], None)[1].tokens)
    for n in SIZES:
        row = {}
        for choice in ("auto", "required"):
            first = [prepare(renamed(pool[:n], trial), choice)[0] for trial in range(firsts)]
            prepare(pool[:n], choice)
            repeated = [prepare(pool[:n], choice)[0] for _ in range(repeats)]
            row[f"{choice}_first"], row[f"{choice}_repeated"] = median_ms(first), median_ms(repeated)
        out[n] = row
        tokens[n] = (len(prepare(pool[:n])[1].tokens) - base) / n
    return out, tokens


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--first", type=int, default=3, help="trials with a never-seen tool set")
    args = ap.parse_args()
    pool = tool_pool()
    assert len(pool) >= max(SIZES), len(pool)

    v = vllm_figures(pool, args.repeats, args.first)
    print("vLLM, per request (ms, median)")
    print(f"{'tools':>6} {'adjust_request first':>21} {'repeated':>9} {'x 1-tool':>9} {'content check':>14} | "
          f"{'vLLM validation first':>21} {'repeated':>9}")
    for n, r in v.items():
        print(f"{n:>6} {r['adjust_first']:>21.2f} {r['adjust_repeated']:>9.3f} "
              f"{r['adjust_repeated'] / v[1]['adjust_repeated']:>8.1f}x {r['content_check']:>14.3f} | "
              f"{r['validate_first']:>21.2f} {r['validate_repeated']:>9.3f}")

    ll, per_tool = llamacpp_figures(pool, args.repeats, args.first)
    print("\nllama.cpp, handler work before the first token (ms, median)")
    print(f"{'tools':>6} {'auto first':>11} {'repeated':>9} {'required first':>15} {'repeated':>9} {'prompt tokens/tool':>19}")
    for n, r in ll.items():
        print(f"{n:>6} {r['auto_first']:>11.2f} {r['auto_repeated']:>9.2f} {r['required_first']:>15.2f} "
              f"{r['required_repeated']:>9.2f} {per_tool[n]:>19.1f}")


if __name__ == "__main__":
    main()
