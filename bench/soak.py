"""Soak test: mixed agent traffic against one toolbridge server on this machine, for a given time.

    python bench/soak.py --base-url http://127.0.0.1:8000/v1 --model smollm2 --minutes 60 \
        [--pid PID] [--workers 2] [--seed 0] [--json out.json] [--plot out.png]
    python bench/soak.py --table out.json      # a saved run as a table per 10 minutes

It sends only to a server on a loopback address (127.0.0.0/8, ::1, localhost) and refuses any other;
its loops are bounded by `--minutes` and `--max-requests`, and it stops by itself. The traffic is a
seeded mix of:
- Chat Completions, Responses and Messages; whole and streamed;
- `tool_choice` auto, required and named (each API's own way of saying it);
- thinking asked for (chat `reasoning_effort`, Responses `reasoning.effort`, Messages `thinking`) and not;
- clients that hang up at a random point (a whole answer after a random wait, a stream after a random
  number of events);
- the hostile bodies of the end-to-end tests (tests/hostile.py), which must be refused with a 400
  or answered.

Every `--every` seconds (30) it prints the requests by outcome, p50 and p99 of the time to the first
streamed event and of the whole answer, and the server's resident memory (the process listening on the
port and its children, or `--pid`'s tree). At the end: any 5xx, any hang (no answer within `--hang`
seconds), any call that names an undeclared tool or whose arguments do not validate against the tool's
schema (jsonschema), and the memory's growth from the first report after `--warmup` seconds to the
last. Exit status 1 when any of those is not zero. `--json` keeps every report; `--plot` draws latency
and memory over time (matplotlib, if installed).
"""
from __future__ import annotations

import argparse
import ipaddress
import json
import os
import random
import re
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlparse

import httpx
import jsonschema

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import hostile  # noqa: E402  (the end-to-end tests' hostile bodies)
from toolsets import SEARCH, WEATHER  # noqa: E402

TOOLS = [WEATHER, SEARCH]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
QUESTIONS = [
    "What is the weather in Paris?", "Is it raining in Tokyo right now?", "Search the web for the tallest building.",
    "Find news about the Mars rover.", "Write two lines about autumn.", "What is 12 times 7?",
    "Weather in Rome in fahrenheit, please.", "Look up the population of Canada.", "Say hello in French.",
    "How warm will it be in Oslo for the next 3 days?",
]
HANG_UP, HOSTILE, THINK = 0.15, 0.1, 0.3  # shares of requests whose client hangs up, hostile bodies, thinking asked
OK, CALLS, REFUSED, HUNG_UP, SERVER_ERROR, HANG, INVALID, CONNECT, WRONGLY_REFUSED = (
    "ok", "ok_calls", "4xx", "hung_up", "5xx", "hang", "invalid_call", "connect_error", "4xx_on_a_good_body")


def loopback_only(base_url: str) -> None:
    """Refuse any server that is not on this machine's loopback addresses."""
    host = urlparse(base_url).hostname or ""
    if host == "localhost":
        return
    try:
        if ipaddress.ip_address(host).is_loopback:
            return
    except ValueError:
        pass
    raise SystemExit(f"soak: refusing {host!r}: this bench sends traffic only to a loopback address "
                     "(127.0.0.0/8, ::1, localhost)")


# -- the server's memory ---------------------------------------------------------------------------

def listening_pid(port: int) -> int | None:
    """The process that listens on `port` (from /proc), or None."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if int(parts[1].rsplit(":", 1)[1], 16) == port and parts[3] == "0A":  # 0A: LISTEN
                inodes.add(parts[9])
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:[") and link[8:-1] in inodes:
                    return int(pid)
        except OSError:
            continue
    return None


def tree_rss_mib(root: int) -> float:
    """Resident memory of `root` and all its descendants, MiB (vLLM's engine runs in a child)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            status = Path(f"/proc/{pid}/status").read_text()
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(pid))
        kb = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)
        rss[int(pid)] = kb
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += rss.get(pid, 0)
        todo += children.get(pid, [])
    return total / 1024


# -- one request ------------------------------------------------------------------------------------

@dataclass
class Plan:
    api: str  # chat, responses, messages, hostile
    stream: bool
    choice: str  # auto, required, named
    thinking: bool
    hang_up: float | None  # whole: seconds before hanging up; stream: events read before hanging up
    body: dict | bytes
    path: str
    case: Any = None  # hostile: its tests/hostile.Case (what it may answer, which tools it declares)


@dataclass
class Result:
    outcome: str
    total: float
    first: float | None = None  # the first streamed event
    detail: str = ""


def choose(rng: random.Random, model: str) -> Plan:
    """One request of the mix."""
    if rng.random() < HOSTILE:
        case = rng.choice(hostile.CASES)
        body = hostile.body_of(case, model)
        return Plan("hostile", case.stream, "-", False, None, body, "/chat/completions", case)
    api = rng.choice(["chat", "responses", "messages"])
    stream, choice, thinking = rng.random() < 0.5, rng.choice(["auto", "required", "named"]), rng.random() < THINK
    hang_up = None
    if rng.random() < HANG_UP:
        hang_up = rng.uniform(0.1, 3.0) if not stream else float(rng.randint(0, 6))
    question, max_tokens = rng.choice(QUESTIONS), rng.randint(16, 160)
    named = rng.choice(TOOLS)["function"]["name"]
    if api == "chat":
        body: dict = {"model": model, "messages": [{"role": "user", "content": question}], "tools": TOOLS,
                      "max_tokens": max_tokens, "temperature": rng.choice([0, 0.7]), "stream": stream,
                      "tool_choice": {"type": "function", "function": {"name": named}} if choice == "named" else choice}
        if thinking:
            body["reasoning_effort"] = "low"
        return Plan(api, stream, choice, thinking, hang_up, body, "/chat/completions")
    if api == "responses":
        tools = [{"type": "function", **t["function"]} for t in TOOLS]
        body = {"model": model, "input": question, "tools": tools, "max_output_tokens": max_tokens, "stream": stream,
                "tool_choice": {"type": "function", "name": named} if choice == "named" else choice,
                "store": rng.random() < 0.5}
        if thinking:
            body["reasoning"] = {"effort": "low"}
        return Plan(api, stream, choice, thinking, hang_up, body, "/responses")
    tools = [{"name": t["function"]["name"], "description": t["function"]["description"],
              "input_schema": t["function"]["parameters"]} for t in TOOLS]
    kind = {"auto": {"type": "auto"}, "required": {"type": "any"}, "named": {"type": "tool", "name": named}}[choice]
    body = {"model": model, "messages": [{"role": "user", "content": question}], "tools": tools, "tool_choice": kind,
            "max_tokens": max_tokens + (1024 if thinking else 0), "stream": stream}
    if thinking:
        body["thinking"] = {"type": "enabled", "budget_tokens": 1024}
    return Plan(api, stream, choice, thinking, hang_up, body, "/messages")


def calls_of(api: str, data: Any) -> list[tuple[str, Any]]:
    """(name, arguments) of every complete call in a whole answer (one cut by the token limit comes
    back half-written, its arguments closed, as OpenAI answers one: it is not checked)."""
    if api in ("chat", "hostile"):
        choice = (data.get("choices") or [{}])[0] or {}
        calls = [(c["function"]["name"], c["function"]["arguments"])
                 for c in (choice.get("message") or {}).get("tool_calls") or ()]
        cut = choice.get("finish_reason") == "length"
    elif api == "responses":
        calls = [(i["name"], i["arguments"]) for i in data.get("output") or () if i.get("type") == "function_call"]
        cut = data.get("status") == "incomplete"
    else:
        calls = [(b["name"], b["input"]) for b in data.get("content") or () if b.get("type") == "tool_use"]
        cut = data.get("stop_reason") == "max_tokens"
    return calls[:-1] if cut else calls


def stream_calls(api: str, events: list[dict]) -> list[tuple[str, Any]]:
    """(name, arguments) of every complete call in a stream's events."""
    if api in ("chat", "hostile"):
        calls: dict[int, list] = {}
        for chunk in events:
            for ch in chunk.get("choices") or ():
                for tc in (ch.get("delta") or {}).get("tool_calls") or ():
                    slot = calls.setdefault(tc.get("index", 0), ["", ""])
                    slot[0] += (tc.get("function") or {}).get("name") or ""
                    slot[1] += (tc.get("function") or {}).get("arguments") or ""
        cut = any(ch.get("finish_reason") == "length" for e in events for ch in e.get("choices") or ())
        out = [tuple(c) for c in calls.values()]
        return out[:-1] if cut and out else out  # a call cut by max_tokens is not complete
    if api == "responses":
        calls = [(e["item"]["name"], e["item"]["arguments"]) for e in events
                 if e.get("type") == "response.output_item.done" and e["item"].get("type") == "function_call"]
        return calls[:-1] if any(e.get("type") == "response.incomplete" for e in events) else calls
    cut = any(e.get("type") == "message_delta" and (e.get("delta") or {}).get("stop_reason") == "max_tokens"
              for e in events)
    blocks: dict[int, list] = {}
    for e in events:
        if e.get("type") == "content_block_start" and e["content_block"].get("type") == "tool_use":
            blocks[e["index"]] = [e["content_block"]["name"], ""]
        elif e.get("type") == "content_block_delta" and e["index"] in blocks:
            blocks[e["index"]][1] += e["delta"].get("partial_json", "")
    done = {e["index"] for e in events if e.get("type") == "content_block_stop"}
    calls = [(n, a or "{}") for i, (n, a) in blocks.items() if i in done]
    return calls[:-1] if cut else calls


def invalid(calls: list[tuple[str, Any]], plan: Plan) -> str:
    """Why a call does not validate ("" when every one does). A hostile body's calls name one of
    its own tools with a JSON object of arguments, and a body that must be refused is not answered."""
    if plan.case is not None:
        if plan.case.expect == "400":
            return f"{plan.case.name}: answered 200, but must be refused with a 400"
        for name, arguments in calls:
            if name not in plan.case.declared:
                return f"{plan.case.name}: call to undeclared tool {name!r}"
            try:
                if not isinstance(json.loads(arguments), dict):
                    return f"{plan.case.name}: arguments not an object: {arguments!r:.200}"
            except (TypeError, ValueError):
                return f"{plan.case.name}: arguments not JSON: {arguments!r:.200}"
        return ""
    for name, arguments in calls:
        if name not in SCHEMAS:
            return f"call to undeclared tool {name!r}"
        try:
            args = json.loads(arguments) if isinstance(arguments, str) else arguments
            jsonschema.validate(args, SCHEMAS[name])
        except (ValueError, jsonschema.ValidationError) as e:
            return f"{name}: {str(e)[:200]}"
    return ""


def stream_error(api: str, events: list[dict]) -> bool:
    return any(e.get("type") == "error" or isinstance(e.get("error"), dict) for e in events)


def run_one(client: httpx.Client, base_url: str, plan: Plan, hang: float) -> Result:
    url = base_url.rstrip("/") + plan.path
    content = plan.body if isinstance(plan.body, bytes) else json.dumps(plan.body).encode()
    headers = {"content-type": "application/json", "x-api-key": "soak", "anthropic-version": "2023-06-01"}
    start = time.perf_counter()
    timeout = httpx.Timeout(hang, connect=10)
    if plan.hang_up is not None and not plan.stream:
        timeout = httpx.Timeout(plan.hang_up, connect=10)
    try:
        if plan.stream:
            with client.stream("POST", url, content=content, headers=headers, timeout=timeout) as r:
                if r.status_code != 200:
                    r.read()
                    return _status_result(r.status_code, time.perf_counter() - start, r.text)
                events, first = [], None
                for line in sse_lines(r):
                    if not line.startswith("data:") or line.strip() == "data: [DONE]":
                        continue
                    first = first if first is not None else time.perf_counter() - start
                    try:
                        events.append(json.loads(line[5:]))
                    except ValueError:
                        return Result(INVALID, time.perf_counter() - start, first, f"not JSON: {line[:200]}")
                    if plan.hang_up is not None and len(events) > plan.hang_up:
                        return Result(HUNG_UP, time.perf_counter() - start, first)  # closes the connection
            total = time.perf_counter() - start
            if stream_error(plan.api, events):
                return Result(SERVER_ERROR, total, first, f"error event: {json.dumps(events[-1])[:300]}")
            why = invalid(stream_calls(plan.api, events), plan)
            if why:
                why += f" | the stream's last events: {json.dumps(events[-3:])[:600]}"
            return Result(INVALID if why else (CALLS if stream_calls(plan.api, events) else OK), total, first, why)
        r = client.post(url, content=content, headers=headers, timeout=timeout)
        total = time.perf_counter() - start
        if r.status_code != 200:
            return _status_result(r.status_code, total, r.text)
        data = r.json()
        why = invalid(calls_of(plan.api, data), plan)
        if why:
            why += f" | the answer: {json.dumps(data)[:600]}"
        return Result(INVALID if why else (CALLS if calls_of(plan.api, data) else OK), total, total, why)
    except httpx.TimeoutException:
        total = time.perf_counter() - start
        if plan.hang_up is not None and not plan.stream:
            return Result(HUNG_UP, total)
        return Result(HANG, total, detail=f"no answer within {hang} s")
    except httpx.TransportError as e:
        return Result(CONNECT, time.perf_counter() - start, detail=f"{type(e).__name__}: {e}")


def sse_lines(response: httpx.Response):
    """A stream's lines as server-sent events end them: at CR, LF or CRLF only. (httpx's iter_lines
    also splits at U+2028, U+0085 and the other separators str.splitlines knows, which JSON text may hold
    unescaped: a model that writes one would look like a broken event.)"""
    pending = ""
    for text in response.iter_text():
        lines = re.split(r"\r\n|\r|\n", pending + text)
        pending = lines.pop()
        yield from lines
    if pending:
        yield pending


def _status_result(status: int, total: float, text: str) -> Result:
    return Result(SERVER_ERROR if status >= 500 else REFUSED, total, None, f"{status} {text[:300]}")


# -- the run ----------------------------------------------------------------------------------------

@dataclass
class Soak:
    base_url: str
    model: str
    seconds: float
    max_requests: int
    workers: int
    hang: float
    pid: int | None
    seed: int
    every: float
    results: list[tuple[float, Plan, Result]] = field(default_factory=list)
    reports: list[dict] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def worker(self, n: int, deadline: float, sent: Callable[[], bool]) -> None:
        rng = random.Random(self.seed * 1000 + n)
        client = httpx.Client()
        try:
            while time.monotonic() < deadline and sent():
                plan = choose(rng, self.model)
                result = run_one(client, self.base_url, plan, self.hang)
                if result.outcome == REFUSED and plan.case is None:
                    result.outcome = WRONGLY_REFUSED  # only the hostile bodies may be refused
                with self.lock:
                    self.results.append((time.monotonic(), plan, result))
                if result.outcome == HUNG_UP:
                    client.close()  # a client that hung up leaves with its connection
                    client = httpx.Client()
                if result.outcome in BAD:
                    print(f"  ! {result.outcome} {plan.api} stream={plan.stream} {plan.choice}: {result.detail}",
                          flush=True)
        finally:
            client.close()

    def report(self, begun: float, since: int) -> int:
        with self.lock:
            window = self.results[since:]
            upto = len(self.results)
            outcomes = Counter(r.outcome for _, _, r in self.results)
        totals = sorted(r.total for _, _, r in window if r.outcome in (OK, CALLS))
        firsts = sorted(r.first for _, p, r in window if p.stream and r.first is not None and r.outcome in (OK, CALLS))
        rss = tree_rss_mib(self.pid) if self.pid else None
        rep = {"t": round(time.monotonic() - begun, 1), "requests": upto, "window": len(window),
               "outcomes": dict(outcomes), "p50_total": pct(totals, 50), "p99_total": pct(totals, 99),
               "p50_first": pct(firsts, 50), "p99_first": pct(firsts, 99), "rss_mib": rss}
        self.reports.append(rep)
        print(f"[{rep['t']:7.1f}s] {upto} requests ({len(window)} new) {dict(sorted(outcomes.items()))} | "
              f"first event p50 {fmt(rep['p50_first'])} p99 {fmt(rep['p99_first'])} | "
              f"whole p50 {fmt(rep['p50_total'])} p99 {fmt(rep['p99_total'])} | "
              f"rss {'?' if rss is None else f'{rss:.0f} MiB'}", flush=True)
        return upto

    def run(self) -> int:
        count = iter(range(self.max_requests))
        count_lock = threading.Lock()

        def sent() -> bool:
            with count_lock:
                return next(count, None) is not None

        begun = time.monotonic()
        deadline = begun + self.seconds
        threads = [threading.Thread(target=self.worker, args=(n, deadline, sent), daemon=True)
                   for n in range(self.workers)]
        for t in threads:
            t.start()
        since = 0
        next_report = begun + self.every
        while any(t.is_alive() for t in threads):
            for t in threads:
                t.join(timeout=max(0.0, min(1.0, next_report - time.monotonic())))
            if time.monotonic() >= next_report:
                since = self.report(begun, since)
                next_report += self.every
            if time.monotonic() > deadline + self.hang + 30:
                print("soak: a worker did not stop after its deadline", flush=True)
                break
        self.report(begun, since)
        return self.verdict()

    def verdict(self) -> int:
        outcomes = Counter(r.outcome for _, _, r in self.results)
        by_api = Counter((p.api, p.stream) for _, p, _ in self.results)
        print("\nrequests:", len(self.results), "| by API (api, streamed):", dict(sorted(by_api.items())))
        print("outcomes:", dict(sorted(outcomes.items())))
        mem = [r["rss_mib"] for r in self.reports if r["rss_mib"] is not None]
        warm = next((r["rss_mib"] for r in self.reports if r["t"] >= WARMUP and r["rss_mib"] is not None), None)
        growth = None
        if warm and mem:
            growth = (mem[-1] - warm) / warm * 100
            print(f"memory: {warm:.0f} MiB at {WARMUP:.0f} s -> {mem[-1]:.0f} MiB at the end ({growth:+.1f}%)")
        bad = {k: outcomes.get(k, 0) for k in BAD}
        print("5xx:", bad[SERVER_ERROR], "| hangs:", bad[HANG], "| invalid calls:", bad[INVALID],
              "| connection errors:", bad[CONNECT], "| good bodies refused:", bad[WRONGLY_REFUSED])
        self.summary = {"requests": len(self.results), "outcomes": dict(outcomes), "memory_growth_pct": growth,
                        "rss_warm_mib": warm, "rss_end_mib": mem[-1] if mem else None, "reports": self.reports}
        return 1 if any(bad.values()) else 0


BAD = (SERVER_ERROR, HANG, INVALID, CONNECT, WRONGLY_REFUSED)  # any of these fails the soak
WARMUP = 300.0  # seconds: memory growth is counted from the first report after this (set by --warmup)


def pct(values: list[float], p: float) -> float | None:
    if not values:
        return None
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}s"


def plot(reports: list[dict], path: str, title: str) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("soak: matplotlib is not installed; no plot", flush=True)
        return
    t = [r["t"] / 60 for r in reports]
    fig, (a, b) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    for key, label in (("p50_total", "whole p50"), ("p99_total", "whole p99"),
                       ("p50_first", "first event p50"), ("p99_first", "first event p99")):
        a.plot(t, [r[key] if r[key] is not None else float("nan") for r in reports], label=label)
    a.set_ylabel("seconds (per 30 s window)")
    a.legend(fontsize=8)
    a.set_title(title)
    b.plot(t, [r["rss_mib"] if r["rss_mib"] is not None else float("nan") for r in reports], color="black")
    b.set_ylabel("server RSS, MiB")
    b.set_xlabel("minutes")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    print(f"soak: plot in {path}", flush=True)


def table(summary: dict, block: float = 600.0) -> str:
    """A saved run (`--json`) as a markdown table per `block` seconds: requests served by the block's
    end and their outcomes, the median of the block's 30-s p50s and the highest of its p99s (first
    streamed event, whole answer), and the server's memory at the block's end."""
    rows = ["| minutes | requests | 5xx / hangs / invalid | first event p50 / p99 | whole p50 / p99 | RSS MiB |",
            "|---|---|---|---|---|---|"]
    reports = summary["reports"]
    if not reports:
        return "\n".join(rows)
    last = int((reports[-1]["t"] - block * 0.05) // block)  # the run's end report joins the last block
    blocks: dict[int, list[dict]] = {}
    for r in reports:
        blocks.setdefault(min(int((r["t"] - 1e-6) // block), last), []).append(r)
    for window in blocks.values():
        end = window[-1]
        bad = " / ".join(str(end["outcomes"].get(k, 0)) for k in (SERVER_ERROR, HANG, INVALID))

        def mid(key: str) -> str:
            values = sorted(r[key] for r in window if r[key] is not None)
            return fmt(values[len(values) // 2] if values else None)

        def top(key: str) -> str:
            return fmt(max((r[key] for r in window if r[key] is not None), default=None))

        rss = "?" if end["rss_mib"] is None else f"{end['rss_mib']:.0f}"
        rows.append(f"| {end['t'] / 60:.0f} | {end['requests']} | {bad} | {mid('p50_first')} / {top('p99_first')} | "
                    f"{mid('p50_total')} / {top('p99_total')} | {rss} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    global WARMUP
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--table", metavar="JSON", help="print a saved run (--json) as a table per 10 minutes, and stop")
    ap.add_argument("--base-url", help="the server's /v1 URL, on a loopback address")
    ap.add_argument("--model")
    ap.add_argument("--minutes", type=float, default=60.0)
    ap.add_argument("--max-requests", type=int, default=100_000)
    ap.add_argument("--workers", type=int, default=2, help="clients at once")
    ap.add_argument("--hang", type=float, default=180.0, help="seconds without an answer that count as a hang")
    ap.add_argument("--pid", type=int, help="the server's process (default: the one listening on the port)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--every", type=float, default=30.0, help="seconds between reports")
    ap.add_argument("--warmup", type=float, default=WARMUP, help="memory growth counts from the report after this")
    ap.add_argument("--json", help="write the reports and the summary here")
    ap.add_argument("--plot", help="write a PNG of latency and memory over time here")
    args = ap.parse_args(argv)
    if args.table:
        print(table(json.loads(Path(args.table).read_text())))
        return 0
    if not args.base_url or not args.model:
        ap.error("--base-url and --model are needed to run a soak")
    loopback_only(args.base_url)
    WARMUP = args.warmup
    port = urlparse(args.base_url).port or 80
    pid = args.pid or listening_pid(port)
    print(f"soak: {args.base_url} model {args.model} for {args.minutes} min, {args.workers} clients, "
          f"server pid {pid}, seed {args.seed}", flush=True)
    soak = Soak(args.base_url, args.model, args.minutes * 60, args.max_requests, args.workers, args.hang, pid,
                args.seed, args.every)
    status = soak.run()
    if args.json:
        Path(args.json).write_text(json.dumps(soak.summary, indent=1))
    if args.plot:
        plot(soak.reports, args.plot, f"soak: {args.model} at {args.base_url}")
    return status


if __name__ == "__main__":
    sys.exit(main())
