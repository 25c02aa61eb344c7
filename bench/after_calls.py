"""What follows an answer's tool calls, on every API of a running server: text after the last call
(explanations, results the model made up), block and item order, and the stop reason.

Reads bfcl's own first-turn requests (`python bench/bfcl.py requests --out FILE`), takes N questions
per category that want a call (spread evenly over each category), and asks each with `tool_choice`
auto, temperature 0 and `max_tokens` 256 through the official clients:
- Chat Completions, streamed (the order of content and tool-call deltas) and not;
- Anthropic Messages (`anthropic`), streamed and not: text blocks after a tool_use block, and
  `stop_reason` (`tool_use` wherever a complete tool_use block is returned);
- OpenAI Responses (`openai`), streamed and not: output text items after a function_call item.
Prints, per API and mode, how many answers made a call and how many of those had text after it.

    python bench/after_calls.py --base-url http://127.0.0.1:8000/v1 --model smollm2 \\
        --requests .cache/bfcl-runs/requests.jsonl --cases 8 --label after [--apis chat,messages,responses]
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

CATEGORIES = ("live_simple", "live_multiple", "live_parallel", "live_parallel_multiple")


def questions(path: Path, per_category: int) -> list[dict]:
    """N requests per category that want a call, spread evenly over the category's order."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    out = []
    for category in CATEGORIES:
        rows_c = [r for r in rows if r["category"] == category and r["expected_calls"]]
        m, n = len(rows_c), per_category
        picks = range(m) if n >= m else sorted({(2 * i + 1) * m // (2 * n) for i in range(n)})
        out += [rows_c[i] for i in picks]
    return out


def chat_stream(oai, model: str, q: dict, extra: dict) -> dict:
    """Content before and after the first tool-call delta, and the calls' names."""
    before, after, names, finish = [], [], [], None
    stream = oai.chat.completions.create(model=model, messages=q["messages"], tools=q["tools"], tool_choice="auto",
                                         temperature=0, max_tokens=256, stream=True, extra_body=extra)
    for chunk in stream:
        for ch in chunk.choices:
            d = ch.delta
            for tc in d.tool_calls or ():
                if tc.function and tc.function.name:
                    names.append(tc.function.name)
            if d.content:
                (after if names else before).append(d.content)
            finish = ch.finish_reason or finish
    return {"calls": names, "before": "".join(before), "after": "".join(after), "finish": finish}


def chat_whole(oai, model: str, q: dict, extra: dict) -> dict:
    r = oai.chat.completions.create(model=model, messages=q["messages"], tools=q["tools"], tool_choice="auto",
                                    temperature=0, max_tokens=256, extra_body=extra)
    m = r.choices[0].message
    return {"calls": [c.function.name for c in m.tool_calls or ()], "content": m.content or "",
            "finish": r.choices[0].finish_reason}


def _messages_body(q: dict) -> dict:
    system = "\n".join(m["content"] for m in q["messages"] if m["role"] == "system" and isinstance(m["content"], str))
    turns = [{"role": m["role"], "content": m["content"]} for m in q["messages"] if m["role"] != "system"]
    tools = [{"name": t["function"]["name"], "description": t["function"].get("description", ""),
              "input_schema": t["function"].get("parameters") or {"type": "object", "properties": {}}} for t in q["tools"]]
    return {"messages": turns, "tools": tools, **({"system": system} if system else {})}


def _order(kinds: list[str], call: str, text: str) -> dict:
    first = kinds.index(call) if call in kinds else None
    return {"calls": kinds.count(call), "text_after": first is not None and text in kinds[first:]}


def messages(ant, model: str, q: dict, stream: bool, extra: dict) -> dict:
    kw = dict(model=model, max_tokens=256, tool_choice={"type": "auto"}, extra_body={"temperature": 0, **extra},
              **_messages_body(q))
    if stream:
        with ant.messages.stream(**kw) as s:
            msg = s.get_final_message()
    else:
        msg = ant.messages.create(**kw)
    kinds = [b.type for b in msg.content if b.type != "text" or b.text.strip()]
    return {**_order(kinds, "tool_use", "text"), "stop_reason": msg.stop_reason}


def responses(oai, model: str, q: dict, stream: bool, extra: dict) -> dict:
    tools = [{"type": "function", "name": t["function"]["name"], "description": t["function"].get("description", ""),
              "parameters": t["function"].get("parameters") or {"type": "object", "properties": {}}} for t in q["tools"]]
    kw = dict(model=model, input=q["messages"], tools=tools, tool_choice="auto", temperature=0, max_output_tokens=256,
              extra_body=extra or None)
    if stream:
        with oai.responses.stream(**kw) as s:
            resp = s.get_final_response()
    else:
        resp = oai.responses.create(**kw)
    kinds = [i.type for i in resp.output if i.type != "message" or any(c.text.strip() for c in i.content or ())]
    return {**_order(kinds, "function_call", "message"), "status": resp.status}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--requests", required=True, help="bfcl's requests (bench/bfcl.py requests --out FILE)")
    ap.add_argument("--cases", type=int, default=8, help="questions per live category that want a call")
    ap.add_argument("--apis", default="chat,messages,responses")
    ap.add_argument("--extra-body", default="{}", help="JSON sent with every request (chat_template_kwargs, ...)")
    ap.add_argument("--label", default="run")
    ap.add_argument("--out", help="JSON-lines file of every answer (default .cache/after-calls/<label>.jsonl)")
    args = ap.parse_args()
    import anthropic
    import openai

    root = args.base_url.rstrip("/").removesuffix("/v1")
    oai = openai.OpenAI(base_url=root + "/v1", api_key="unused", max_retries=0, timeout=600)
    ant = anthropic.Anthropic(base_url=root, api_key="unused", max_retries=0, timeout=600)
    extra = json.loads(args.extra_body)
    apis = args.apis.split(",")
    out = Path(args.out or Path(__file__).resolve().parents[1] / ".cache" / "after-calls" / f"{args.label}.jsonl")
    out.parent.mkdir(parents=True, exist_ok=True)
    qs = questions(Path(args.requests), args.cases)
    counts: dict[str, list[int]] = {}
    t0 = time.time()
    with out.open("w") as f:
        for q in qs:
            row: dict = {"id": q["id"]}
            if "chat" in apis:
                row["chat_stream"] = s = chat_stream(oai, args.model, q, extra)
                row["chat"] = w = chat_whole(oai, args.model, q, extra)
                _count(counts, "chat, streamed", bool(s["calls"]), bool(s["after"].strip()))
                # not streamed, the content's order is not seen: text that the stream showed after the call
                _count(counts, "chat, not streamed", bool(w["calls"]),
                       bool(w["calls"]) and w["content"].strip() != s["before"].strip() and bool(w["content"].strip()))
            for api, call in (("messages", messages), ("responses", responses)):
                if api not in apis:
                    continue
                for stream in (True, False):
                    try:
                        r = call(ant if api == "messages" else oai, args.model, q, stream, extra)
                    except Exception as e:  # recorded, not fatal: the answer's error is a finding too
                        r = {"error": f"{type(e).__name__}: {e}"[:300], "calls": 0, "text_after": False}
                    row[f"{api}_{'stream' if stream else 'whole'}"] = r
                    key = f"{api}, {'streamed' if stream else 'not streamed'}"
                    _count(counts, key, bool(r["calls"]), r["text_after"])
                    if api == "messages" and r["calls"]:
                        _count(counts, key + ": stop_reason tool_use", True, r.get("stop_reason") != "tool_use")
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"{args.label}: {len(qs)} questions, {time.time() - t0:.0f} s; answers with a call, and of those with "
          "text after it (stop_reason rows: answers whose stop_reason is not tool_use)")
    for key, (called, after) in counts.items():
        print(f"  {key:45s} {called:3d} with a call, {after:3d} with text after it")
    print(f"  answers: {out}")


def _count(counts: dict, key: str, called: bool, after: bool) -> None:
    c = counts.setdefault(key, [0, 0])
    c[0] += called
    c[1] += called and after


if __name__ == "__main__":
    main()
