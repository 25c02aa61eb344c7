"""Thinking matrix: does a server return a thinking model's thinking apart from its content, and
still call the tools, under every tool_choice, whole and streamed?

Against any running OpenAI-compatible server whose chat template opens a thinking block
(`<think>`; on this machine: SmolLM2 or Qwen under tests/data/chatml_think.jinja), the script asks N
of Berkeley's live function-calling questions (bfcl's own first-turn requests: messages and tools,
`python bench/bfcl.py requests`; a mix of live_simple, live_multiple and live_parallel, spread evenly
over each category) under `tool_choice` auto, required and named (the ground truth's first function),
each whole and streamed, at temperature 0, `max_tokens` 256, with a thinking budget sent per request
as `chat_template_kwargs: {"tb_thinking_budget": B}` (`python -m llamacpp_ext` reads it per request;
on vLLM it reaches the template).

Per mode and per kind (whole, streamed) it counts:
- answers that end in a call (`tool_calls` not empty; `required` and named must be 100%), and the calls;
- answers whose `content` holds a thinking marker (`<think>`, `</think>`) or the thinking text
  (the first 32 characters of the answer's own reasoning, or of the other kind's, found in content);
  must be 0;
- answers with content but no reasoning: under a template whose prompt opens `<think>`, a server
  that splits nothing returns the thinking itself as content (this is what "before" counts);
- answers with a non-empty reasoning field (`reasoning_content`, as llama.cpp names it, or
  `reasoning`, vLLM's name: either is read);
- the reasoning's length in tokens against the budget, counted with the server's own tokenizer
  (`/extras/tokenize` on llama-cpp-python, `/tokenize` without special tokens on vLLM; where neither
  answers, the usage's completion_tokens, which also count the answer, marked `~`);
- streamed equals whole: the same calls (names and arguments, compared as parsed JSON), the same
  reasoning and the same content after the stream is assembled. On llama.cpp two generations at
  temperature 0 may differ (prompt-cache reuse moves a small model's logits), so a mismatch is
  reported with examples, not failed.

    python bench/bfcl.py requests --categories live_simple,live_multiple,live_parallel \\
        --out .cache/matrix/live-requests.jsonl
    python bench/thinking_matrix.py --base-url http://127.0.0.1:8011/v1 --model qwen \\
        --requests .cache/matrix/live-requests.jsonl --out .cache/matrix/qwen-after.jsonl

The server, e.g.:

    python -m llamacpp_ext --model QWEN.gguf --n_ctx 8192 --n_threads 2 --n_threads_batch 2 --port 8011 \\
        --model_alias qwen --chat_template_kwargs '{"tb_template": "tests/data/chatml_think.jinja"}'

Prints one table per mode and writes every answer (JSON lines) to --out if given.
"""
from __future__ import annotations

import argparse
import glob
import json
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
MARKERS = ("<think>", "</think>")
MODES = ("auto", "required", "named")
SHARE = {"live_simple": 14, "live_multiple": 12, "live_parallel": 6}  # of 32


# -- the questions ---------------------------------------------------------------------------------

def possible_answers(venv: Path) -> dict[str, list]:
    out = {}
    for path in glob.glob(str(venv / "lib" / "python3*" / "site-packages" / "bfcl_eval" / "data" / "possible_answer"
                              / "BFCL_v4_live_*.json")):
        for line in open(path, encoding="utf-8"):
            if line.strip():
                row = json.loads(line)
                out[row["id"]] = row["ground_truth"]
    return out


def spread(n: int, m: int) -> list[int]:
    """n of m indices, the middle of n equal slices (bench/bfcl.py's choice)."""
    return list(range(m)) if n >= m else sorted({(2 * i + 1) * m // (2 * n) for i in range(n)})


def questions(requests: Path, venv: Path, n: int) -> list[dict]:
    rows = [json.loads(line) for line in open(requests, encoding="utf-8") if line.strip()]
    truth = possible_answers(venv)
    if not truth:
        raise SystemExit(f"no bfcl possible answers under {venv} (python bench/bfcl.py setup)")
    counts = {c: max(1, round(n * k / 32)) for c, k in SHARE.items()}
    counts["live_simple"] = max(1, n - counts["live_multiple"] - counts["live_parallel"])
    chosen = []
    for category, k in counts.items():
        pool = [r for r in rows if r["category"] == category and r["id"] in truth]
        for i in spread(k, len(pool)):
            row = pool[i]
            names = [f["function"]["name"] for f in row["tools"]]
            first = next(iter(truth[row["id"]][0]))
            # bfcl sends dotted names with underscores (underscore_to_dot)
            name = first if first in names else first.replace(".", "_")
            if name not in names:
                raise SystemExit(f"{row['id']}: ground truth {first!r} is none of the tools {names}")
            chosen.append({**row, "named": name, "truth": truth[row["id"]]})
    return chosen[:n]


# -- asking ----------------------------------------------------------------------------------------

def reasoning_of(obj: dict) -> str:
    return obj.get("reasoning_content") or obj.get("reasoning") or ""


def request_body(q: dict, mode: str, args) -> dict:
    body = {"model": args.model, "messages": q["messages"], "tools": q["tools"], "temperature": 0,
            "max_tokens": args.max_tokens, "chat_template_kwargs": {"tb_thinking_budget": args.budget}}
    if mode == "named":
        body["tool_choice"] = {"type": "function", "function": {"name": q["named"]}}
    else:
        body["tool_choice"] = mode
    return body


def ask_whole(client: httpx.Client, url: str, body: dict) -> dict:
    r = client.post(url, json=body)
    if r.status_code != 200:
        return {"error": f"HTTP {r.status_code}: {r.text[:300]}"}
    data = r.json()
    choice = data["choices"][0]
    m = choice["message"]
    calls = [(c["function"]["name"], c["function"].get("arguments") or "") for c in m.get("tool_calls") or []]
    return {"reasoning": reasoning_of(m), "content": m.get("content") or "", "calls": calls,
            "finish": choice.get("finish_reason"), "completion_tokens": (data.get("usage") or {}).get("completion_tokens")}


def ask_stream(client: httpx.Client, url: str, body: dict) -> dict:
    body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    reasoning, content, calls, finish, usage = "", "", {}, None, None
    with client.stream("POST", url, json=body) as r:
        if r.status_code != 200:
            r.read()
            return {"error": f"HTTP {r.status_code}: {r.text[:300]}"}
        for line in r.iter_lines():
            if not line.startswith("data:"):
                continue
            payload = line[5:].strip()
            if payload == "[DONE]":
                break
            chunk = json.loads(payload)
            if "error" in chunk and not chunk.get("choices"):
                return {"error": f"stream error: {json.dumps(chunk)[:300]}"}
            usage = chunk.get("usage") or usage
            for choice in chunk.get("choices") or []:
                d = choice.get("delta") or {}
                reasoning += reasoning_of(d)
                content += d.get("content") or ""
                for tc in d.get("tool_calls") or []:
                    name, arguments = calls.get(tc.get("index", 0), ("", ""))
                    f = tc.get("function") or {}
                    calls[tc.get("index", 0)] = (name + (f.get("name") or ""), arguments + (f.get("arguments") or ""))
                finish = choice.get("finish_reason") or finish
    return {"reasoning": reasoning, "content": content, "calls": [c for _, c in sorted(calls.items())],
            "finish": finish, "completion_tokens": (usage or {}).get("completion_tokens")}


class Tokens:
    """Token counts by the server's own tokenizer; None where it has no tokenize route."""

    def __init__(self, client: httpx.Client, base_url: str, model: str):
        self.client, self.model = client, model
        self.root = base_url.rstrip("/").removesuffix("/v1")
        self.route, self.offset = None, 0
        for route in ("/extras/tokenize", "/tokenize"):
            try:
                if self._count(route, "hello world") is not None:
                    self.route = route
                    # llama-cpp-python's route adds a BOS token where the model has one: not thinking
                    try:
                        self.offset = self._count(route, "") or 0
                    except (httpx.HTTPError, ValueError, KeyError):
                        self.offset = 0
                    break
            except (httpx.HTTPError, ValueError, KeyError):
                continue

    def _count(self, route: str, text: str) -> int | None:
        if route == "/extras/tokenize":
            r = self.client.post(self.root + route, json={"input": text, "model": self.model})
        else:
            r = self.client.post(self.root + route, json={"model": self.model, "prompt": text, "add_special_tokens": False})
        if r.status_code != 200:
            return None
        return len(r.json()["tokens"])

    def __call__(self, text: str) -> int | None:
        if not text:
            return 0
        return self._count(self.route, text) - self.offset if self.route else None


# -- counting --------------------------------------------------------------------------------------

def parsed(arguments: str):
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments


def same_calls(a: list, b: list) -> bool:
    return [(n, parsed(x)) for n, x in a] == [(n, parsed(x)) for n, x in b]


def same_answer(w: dict, s: dict) -> bool:
    """The same calls, reasoning and content."""
    return same_calls(w["calls"], s["calls"]) and w["reasoning"] == s["reasoning"] and \
        (w["content"] or "") == (s["content"] or "")


def leaks(answer: dict, other: dict | None) -> bool:
    content = answer.get("content") or ""
    if any(m in content for m in MARKERS):
        return True
    for source in (answer, other or {}):
        head = (source.get("reasoning") or "").strip()[:32]
        if len(head) >= 8 and head in content:
            return True
    return False


def calls_in(text: str, tools: list) -> int:
    """The complete calls toolbridge's parser reads in a text (any dialect), with the question's tools."""
    from toolbridge.request import prepare

    try:
        return len(prepare(tools=tools, messages=[{"role": "user", "content": "?"}], env={}).parse(text).calls)
    except Exception:  # a tool list the core refuses: counted as none
        return 0


def summarize(rows: list[dict], budget: int) -> dict:
    ok = [r for r in rows if "error" not in r]
    toks = [r["reasoning_tokens"] for r in ok if r.get("reasoning_tokens") is not None and r["reasoning"]]
    finishes: dict[str, int] = {}
    for r in ok:
        finishes[str(r["finish"])] = finishes.get(str(r["finish"]), 0) + 1
    return {"n": len(rows), "errors": len(rows) - len(ok), "called": sum(bool(r["calls"]) for r in ok),
            "calls": sum(len(r["calls"]) for r in ok), "leaks": sum(r["leak"] for r in ok),
            "reasoning": sum(bool(r["reasoning"].strip()) for r in ok),
            "tokens": toks, "over": sum(t > budget for t in toks), "finishes": finishes,
            "content": sum(bool((r["content"] or "").strip()) for r in ok),
            "bare": sum(bool((r["content"] or "").strip()) and not r["reasoning"].strip() for r in ok),
            "inside": sum(bool(r.get("reasoning_calls")) for r in ok),
            "lost": sum(bool(r.get("reasoning_calls")) and not r["calls"] for r in ok)}


def pct(k: int, n: int) -> str:
    return f"{k}/{n} ({100 * k / n:.0f}%)" if n else "0/0"


def table(mode: str, whole: list[dict], streamed: list[dict], budget: int, approx: bool) -> str:
    lines = [f"### tool_choice {mode}", "",
             "| kind | answers | errors | ended in a call | calls | content with thinking/marker | non-empty content "
             "| content, no reasoning | non-empty reasoning | reasoning tokens mean / max (budget %d)%s | over budget "
             "| a call in the reasoning (no call after) | finish reasons |" % (budget, " ~usage" if approx else ""),
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for kind, rows in (("whole", whole), ("streamed", streamed)):
        s = summarize(rows, budget)
        t = s["tokens"]
        mean = f"{sum(t) / len(t):.1f} / {max(t)}" if t else "-"
        fin = ", ".join(f"{k} {v}" for k, v in sorted(s["finishes"].items()))
        lines.append(f"| {kind} | {s['n']} | {s['errors']} | {pct(s['called'], s['n'])} | {s['calls']} | {s['leaks']} "
                     f"| {s['content']} | {s['bare']} | {pct(s['reasoning'], s['n'])} | {mean} | {s['over']} "
                     f"| {s['inside']} ({s['lost']}) | {fin} |")
    pairs = [(w, s) for w, s in zip(whole, streamed) if "error" not in w and "error" not in s]
    c = sum(same_calls(w["calls"], s["calls"]) for w, s in pairs)
    r = sum(w["reasoning"] == s["reasoning"] for w, s in pairs)
    o = sum((w["content"] or "") == (s["content"] or "") for w, s in pairs)
    a = sum(same_answer(w, s) for w, s in pairs)
    lines += ["", f"streamed == whole ({len(pairs)} pairs): calls {c}, reasoning {r}, content {o}, all three {a}"]
    shown = 0
    for w, s in pairs:
        if shown >= 3:
            break
        if not same_answer(w, s):
            shown += 1
            lines.append(f"- {w['id']}: whole {brief(w)} | streamed {brief(s)}")
    for rows in (whole, streamed):
        for x in rows:
            if "error" in x:
                lines.append(f"- error {x['id']} ({x['kind']}): {x['error'][:200]}")
                break
    return "\n".join(lines)


def tables(results: dict[str, dict[str, list]], budget: int, approx: bool) -> None:
    for mode, kinds in results.items():
        print(table(mode, kinds["whole"], kinds["streamed"], budget, approx))
        print()


def brief(a: dict) -> str:
    calls = "; ".join(f"{n}({x[:80]})" for n, x in a["calls"]) or "no call"
    return f"reasoning {a['reasoning'][:60]!r} content {(a['content'] or '')[:60]!r} calls {calls}"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base-url", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--questions", type=int, default=32)
    p.add_argument("--budget", type=int, default=32, help="tb_thinking_budget per request (default 32)")
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--requests", default=str(ROOT / ".cache" / "matrix" / "live-requests.jsonl"),
                   help="bfcl's first-turn requests (written with bench/bfcl.py requests if missing)")
    p.add_argument("--venv", default=str(ROOT / ".cache" / "bfcl-venv"), help="bfcl's venv (its possible answers)")
    p.add_argument("--out", help="JSON-lines file for every answer")
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--rescore", help="print the tables of a file --out wrote (no server asked)")
    args = p.parse_args(argv)
    if args.rescore:
        return rescore(Path(args.rescore), Path(args.requests), args.budget)

    requests = Path(args.requests)
    if not requests.exists():
        requests.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, str(ROOT / "bench" / "bfcl.py"), "requests", "--categories",
                        ",".join(SHARE), "--out", str(requests), "--venv", args.venv], check=True)
    qs = questions(requests, Path(args.venv), args.questions)
    url = args.base_url.rstrip("/") + "/chat/completions"
    client = httpx.Client(timeout=args.timeout)
    count = Tokens(client, args.base_url, args.model)
    approx = count.route is None
    out = open(args.out, "w", encoding="utf-8") if args.out else None
    mix = ", ".join(f"{c} {sum(q['category'] == c for q in qs)}" for c in SHARE)
    print(f"{len(qs)} questions ({mix}), "
          f"budget {args.budget}, max_tokens {args.max_tokens}, tokens by {count.route or 'usage (approximate)'}",
          file=sys.stderr)
    results: dict[str, dict[str, list]] = {}
    t0 = time.time()
    for mode in args.modes.split(","):
        results[mode] = {"whole": [], "streamed": []}
        for i, q in enumerate(qs):
            body = request_body(q, mode, args)
            pair = {}
            for kind, ask in (("whole", ask_whole), ("streamed", ask_stream)):
                try:
                    a = ask(client, url, body)
                except (httpx.HTTPError, ValueError) as e:
                    a = {"error": f"{type(e).__name__}: {e}"}
                a.update(id=q["id"], category=q["category"], mode=mode, kind=kind, named=q["named"])
                pair[kind] = a
            for kind, a in pair.items():
                if "error" not in a:
                    other = pair["streamed" if kind == "whole" else "whole"]
                    a["leak"] = leaks(a, other if "error" not in other else None)
                    a["reasoning_tokens"] = count(a["reasoning"]) if not approx else (
                        a["completion_tokens"] if a["reasoning"] else 0)
                    a["reasoning_calls"] = calls_in(a["reasoning"], q["tools"])
                results[mode][kind].append(a)
                if out:
                    out.write(json.dumps(a) + "\n")
                    out.flush()
            print(f"[{time.time() - t0:6.0f}s] {mode} {i + 1}/{len(qs)} {q['id']}: "
                  + " | ".join(f"{k}: {'ERR' if 'error' in a else (len(a['calls']), a['finish'])}" for k, a in pair.items()),
                  file=sys.stderr)
    print(f"# thinking matrix: {args.model} at {args.base_url}, {len(qs)} questions, budget {args.budget}, "
          f"max_tokens {args.max_tokens}, temperature 0; reasoning tokens by "
          f"{'the server tokenizer ' + count.route if not approx else 'usage completion_tokens (approximate, includes the answer)'}\n")
    tables(results, args.budget, approx)


def rescore(answers: Path, requests: Path, budget: int) -> None:
    """The tables of a run's answers again, with the calls in each reasoning counted by today's parser."""
    tools = {r["id"]: r["tools"] for r in map(json.loads, open(requests, encoding="utf-8")) if r}
    rows = [json.loads(line) for line in open(answers, encoding="utf-8") if line.strip()]
    results: dict[str, dict[str, list]] = {}
    for a in rows:
        if "error" not in a:
            a["reasoning_calls"] = calls_in(a["reasoning"], tools[a["id"]])
        results.setdefault(a["mode"], {"whole": [], "streamed": []})[a["kind"]].append(a)
    print(f"# thinking matrix, rescored: {answers}, budget {budget}\n")
    tables(results, budget, False)


if __name__ == "__main__":
    main()
