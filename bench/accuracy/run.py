"""Tool-calling accuracy against any OpenAI-compatible server.

62 questions of our own (bench/accuracy/questions.json) over 16 tools: a single tool, a
choice among several, parallel calls, and questions that need no tool. Scored the way
function-calling benchmarks (BFCL's AST checks) score: the called names must be the expected
ones (as a multiset); each expected argument must equal one of its acceptable values (strings
compared case- and space-insensitively, numbers by value); optional arguments may be omitted;
an argument the answer does not expect is wrong. Prints, for `auto` and `required`: the share
answered with a call, with all calls schema-valid, with the right names, exactly right.
`auto` is scored over all questions (no call is right for no-tool ones); `required` over the
questions that need a tool.

    python bench/accuracy/run.py --base-url http://127.0.0.1:8000/v1 --model smollm2 --label toolbridge
    (--extra-body '{"chat_template_kwargs": {"tb_dialect": "json"}}' passes request options)
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from itertools import permutations
from pathlib import Path
from typing import Any

import jsonschema
import openai

HERE = Path(__file__).resolve().parent
TOOLS: dict[str, dict] = json.loads((HERE / "tools.json").read_text())
QUESTIONS: list[dict] = json.loads((HERE / "questions.json").read_text())["questions"]


def openai_tools(names: list[str]) -> list[dict]:
    return [{"type": "function", "function": {"name": n, **TOOLS[n]}} for n in names]


def norm(v: Any) -> Any:
    if isinstance(v, str):
        return re.sub(r"\s+", " ", v.casefold()).strip().rstrip(".!")
    return v


def value_ok(got: Any, acceptable: list) -> bool:
    for want in acceptable:
        if want is None:
            continue
        if isinstance(want, bool) or isinstance(got, bool):
            if got is want:
                return True
        elif isinstance(want, (int, float)) and isinstance(got, (int, float)):
            if float(got) == float(want):
                return True
        elif norm(got) == norm(want):
            return True
    return False


def call_ok(got: dict, want: dict) -> bool:
    if got["name"] != want["name"]:
        return False
    args, expected = got["arguments"], want["arguments"]
    if not isinstance(args, dict) or any(k not in expected for k in args):
        return False
    return all(value_ok(args[k], acc) if k in args else None in acc for k, acc in expected.items())


def score(q: dict, calls: list[dict]) -> dict:
    """calls: [{"name", "arguments" (parsed or None)}]"""
    expected = q["expected"]
    valid = bool(calls) and all(
        c["name"] in TOOLS and c["name"] in q["tools"] and isinstance(c["arguments"], dict)
        and not list(jsonschema.Draft202012Validator(TOOLS[c["name"]]["parameters"]).iter_errors(c["arguments"]))
        for c in calls)
    names = Counter(c["name"] for c in calls) == Counter(e["name"] for e in expected)
    exact = names and (not expected or any(all(call_ok(c, e) for c, e in zip(perm, expected))
                                           for perm in permutations(calls)))
    return {"called": bool(calls), "valid": valid, "names": names, "exact": exact}


def ask(client: openai.OpenAI, model: str, q: dict, mode: str, max_tokens: int, extra: dict) -> tuple[list, dict]:
    r = client.chat.completions.create(model=model, messages=[{"role": "user", "content": q["question"]}],
                                       tools=openai_tools(q["tools"]), tool_choice=mode, temperature=0,
                                       max_tokens=max_tokens, extra_body=extra or None)
    calls = []
    for tc in r.choices[0].message.tool_calls or []:
        try:
            args = json.loads(tc.function.arguments)
        except (TypeError, ValueError):
            args = None
        calls.append({"name": tc.function.name, "arguments": args})
    return calls, {"content": r.choices[0].message.content, "finish": r.choices[0].finish_reason,
                   "prompt_tokens": r.usage.prompt_tokens if r.usage else None}


def prompt_overhead(client: openai.OpenAI, model: str, extra: dict) -> int | None:
    """Prompt tokens the tools add: get_weather and search_web, against the same question without tools
    (tool_choice auto; one completion token)."""
    msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
    base = client.chat.completions.create(model=model, messages=msgs, max_tokens=1, temperature=0, extra_body=extra or None)
    with_tools = client.chat.completions.create(model=model, messages=msgs, max_tokens=1, temperature=0,
                                                tools=openai_tools(["get_weather", "search_web"]), tool_choice="auto",
                                                extra_body=extra or None)
    if not (base.usage and with_tools.usage):
        return None
    return with_tools.usage.prompt_tokens - base.usage.prompt_tokens


def run(base_url: str, model: str, modes: list[str], max_tokens: int, extra: dict, log: Path | None,
        concurrency: int = 1) -> dict:
    """Ask every question in each mode; `concurrency` questions at a time (a server that batches,
    as vLLM does, answers them together)."""
    client = openai.OpenAI(base_url=base_url, api_key="unused", timeout=1800, max_retries=0)
    out: dict[str, Any] = {}
    rows = []

    def one(q: dict, mode: str) -> tuple[list, dict, bool]:
        try:
            return *ask(client, model, q, mode, max_tokens, extra), False
        except openai.APIError as e:
            return [], {"error": str(e)[:200]}, True

    for mode in modes:
        scores, errors, t0 = [], 0, time.time()
        asked = [q for q in QUESTIONS if mode != "required" or q["expected"]]
        with ThreadPoolExecutor(max(1, concurrency)) as pool:
            answers = list(pool.map(lambda q: one(q, mode), asked))
        for q, (calls, meta, failed) in zip(asked, answers):
            errors += failed
            s = score(q, calls)
            scores.append(s)
            rows.append({"mode": mode, "id": q["id"], **s, "calls": calls, **meta})
        n = len(scores)
        out[mode] = {k: sum(s[k] for s in scores) / n for k in ("called", "valid", "names", "exact")}
        out[mode].update(n=n, errors=errors, seconds=round(time.time() - t0, 1))
    try:
        out["overhead_tokens"] = prompt_overhead(client, model, extra)
    except openai.APIError:
        out["overhead_tokens"] = None
    if log:
        log.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return out


def table(results: dict[str, dict]) -> str:
    lines = ["| setup | mode | n | answered with a call | schema-valid calls | right names | exactly right | errors |",
             "|---|---|---|---|---|---|---|---|"]
    for label, res in results.items():
        for mode in ("auto", "required"):
            if mode in res:
                r = res[mode]
                lines.append(f"| {label} | {mode} | {r['n']} | {r['called']:.0%} | {r['valid']:.0%} | {r['names']:.0%} | "
                             f"{r['exact']:.0%} | {r['errors']} |")
    lines.append("")
    lines.append("| setup | prompt tokens added by get_weather + search_web |")
    lines.append("|---|---|")
    for label, res in results.items():
        lines.append(f"| {label} | {res.get('overhead_tokens')} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--label", default="server")
    ap.add_argument("--modes", default="auto,required")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--extra-body", default="{}", help="JSON merged into every request body")
    ap.add_argument("--log", type=Path, help="write per-question results (JSON lines) here")
    ap.add_argument("--json", type=Path, help="append {label: results} to this JSON file")
    ap.add_argument("--concurrency", type=int, default=1, help="questions asked at a time")
    a = ap.parse_args(argv)
    res = run(a.base_url, a.model, a.modes.split(","), a.max_tokens, json.loads(a.extra_body), a.log, a.concurrency)
    print(table({a.label: res}))
    if a.json:
        prev = json.loads(a.json.read_text()) if a.json.exists() else {}
        prev[a.label] = res
        a.json.write_text(json.dumps(prev, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
