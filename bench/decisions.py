"""Where an `auto` answer decides whether to call, measured on Berkeley's function-calling requests.

An answer decides twice: at its first token (a call start, or text), and right after its first call
(another call start, or the end of the turn). toolbridge's steering biases the call starts at both
places (`tb_call_bias`, `tb_next_bias`); this bench reads, for each case, the model's own
log-probabilities there, before any bias, so a bias can be chosen from how they fall on questions
that want zero, one or several calls.

Each case is answered by toolbridge's llama.cpp handler in process (greedy, the options given), with
a recorder of the raw logits at every step (the logits as the model gave them, before toolbridge
writes its changes). Per case:
- `first`: at the answer's first token, the best call start's first token minus the best other token
  (log-probabilities): a call bias `b` makes the answer a call where `first + b > 0`;
- `next`: right after the answer's first call, at the step where the model weighs ending its turn
  most, the best call start's first token's log-probability, and the end's (`end`, about 0 when the
  model means to stop): a next-call bias `b` starts a second call where `next + b > end`;
- `later`: the same right after the answer's second call (a third call against the end);
- `names`: the names of the answer's calls (which tools the question named, and which of them the
  answer called, move the biases after each call: toolbridge.steer.relevance.asked_for).

Cases are bfcl's own first-turn requests (`python bench/bfcl.py requests --out FILE`): its handler's
messages and tools, and how many calls each case expects.

    python bench/bfcl.py requests --out .cache/bfcl-runs/live-requests.jsonl
    python bench/decisions.py --requests .cache/bfcl-runs/live-requests.jsonl --model QWEN.gguf --cases 36
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import llama_cpp  # noqa: E402

import llamacpp_ext.generate as generate  # noqa: E402
from llamacpp_ext.compat import is_end_of_generation, vocabulary  # noqa: E402
from llamacpp_ext.handler import toolbridge_chat_handler  # noqa: E402
from toolbridge.steer.callguard import CallGuard  # noqa: E402
from toolbridge.dialects import get_dialect  # noqa: E402
from toolbridge.constrain.grammar import call_starts  # noqa: E402
from toolbridge.steer.steering import Steering  # noqa: E402

BIASES = (3, 5, 6, 7, 8, 9)


def pick(cases: list[dict], n: int) -> list[dict]:
    """n cases spread over the list (the middle of n equal slices, as bench/bfcl.py picks), or all."""
    m = len(cases)
    return cases if n <= 0 or n >= m else [cases[i] for i in sorted({(2 * k + 1) * m // (2 * n) for k in range(n)})]


class Recorder:
    """The raw logits of one answer's steps, read where it decides."""

    def __init__(self, starts: list[int], ends: list[int], texts: list[str], dialect: str):
        self.starts, self.ends, self.texts = starts, ends, texts
        self.firsts = call_starts(get_dialect(dialect))
        self.reset()

    def reset(self) -> None:
        self.prompt: int | None = None
        self.raw: np.ndarray | None = None
        self.guard = CallGuard(self.firsts)
        self.read = 0
        self.first: float | None = None
        self.after: dict[int, tuple[float, float]] = {}  # by calls written: (next, end) where end is highest

    @property
    def next(self) -> tuple[float, float] | None:
        return self.after.get(1)

    @property
    def later(self) -> tuple[float, float] | None:
        """The same as `next`, right after the second call."""
        return self.after.get(2)

    def write(self, real):
        def recording(logits, edits, array):
            self.raw = np.array(logits[0], dtype=np.float64)
            real(logits, edits, array)
        return recording

    def __call__(self, ids, logits):
        raw = self.raw if self.raw is not None else np.asarray(logits, dtype=np.float64)
        self.raw = None
        if self.prompt is None:
            self.prompt = len(ids)
        for t in ids[self.prompt + self.read:]:
            self.guard.feed(self.texts[t])
            self.read += 1
        lp = raw - (np.log(np.exp(raw - raw.max()).sum()) + raw.max())
        if len(ids) == self.prompt and self.first is None:
            others = np.delete(lp, self.starts)
            self.first = float(lp[self.starts].max() - others.max())
        elif self.guard.calls in (1, 2) and self.guard.between:
            end = float(np.log(np.exp(lp[self.ends]).sum()))
            kept = self.after.get(self.guard.calls)
            if kept is None or end > kept[1]:
                self.after[self.guard.calls] = (float(lp[self.starts].max()), end)
        return logits


def quartiles(xs: list[float]) -> str:
    if not xs:
        return "n/a"
    xs = sorted(xs)
    q = statistics.quantiles(xs, n=4, method="inclusive") if len(xs) > 1 else [xs[0]] * 3
    return f"{xs[0]:.1f} / {q[0]:.1f} / {q[1]:.1f} / {q[2]:.1f} / {xs[-1]:.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", required=True, help="bench/bfcl.py requests output")
    ap.add_argument("--model", required=True, help="a GGUF")
    ap.add_argument("--categories", default="live_simple,live_multiple,live_parallel,live_parallel_multiple,"
                    "live_irrelevance")
    ap.add_argument("--cases", type=int, default=36, help="cases per category, spread over it; 0 = all")
    ap.add_argument("--options", default="{}", help="the model's chat_template_kwargs (tb_* options), JSON")
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", help="write each case's figures here (JSON lines)")
    args = ap.parse_args()

    llama = llama_cpp.Llama(model_path=args.model, n_ctx=16384, n_threads=args.threads,
                            n_threads_batch=args.threads, verbose=False)
    vocab = vocabulary(llama)
    options = json.loads(args.options)
    dialect = options.get("tb_dialect") or "tags"
    encode = lambda t: llama.tokenize(t.encode("utf-8"), add_bos=False, special=False)  # noqa: E731
    starts = list(Steering.for_dialect(get_dialect(dialect), encode, start_bias=1.0).starts)
    ends = [t for t in range(llama.n_vocab()) if is_end_of_generation(llama, t)]
    rec = Recorder(starts, ends, vocab.texts, dialect)
    generate.write = rec.write(generate.write)

    by_category: dict[str, list[dict]] = {}
    for line in open(args.requests, encoding="utf-8"):
        case = json.loads(line)
        by_category.setdefault(case["category"], []).append(case)
    out = open(args.out, "w") if args.out else None
    rows: list[dict] = []
    for category in args.categories.split(","):
        for case in pick(by_category.get(category, []), args.cases):
            rec.reset()
            t0 = time.monotonic()
            r = toolbridge_chat_handler(llama=llama, messages=case["messages"], tools=case["tools"], temperature=0.0,
                                        max_tokens=args.max_tokens, logits_processor=[rec], **dict(options))
            calls = r["choices"][0]["message"].get("tool_calls") or []
            row = {"id": case["id"], "category": category, "expected_calls": case["expected_calls"],
                   "calls": len(calls), "names": [c["function"]["name"] for c in calls], "first": rec.first,
                   "next": rec.next, "later": rec.later, "secs": round(time.monotonic() - t0, 1)}
            rows.append(row)
            if out:
                out.write(json.dumps(row) + "\n")
            print(f"{case['id']}: {len(calls)} of {case['expected_calls']} calls, first {rec.first:+.2f}"
                  + (f", next {rec.next[0]:.2f} (end {rec.next[1]:.2f})" if rec.next else ""), file=sys.stderr)
    print(table(rows))


def table(rows: list[dict]) -> str:
    lines = ["| cases | n | `first`: min / q1 / median / q3 / max | called | `next` - `end`: min / q1 / median / q3 / max | "
             + " | ".join(f"a second call at {b}" for b in BIASES) + " |",
             "|---" * (5 + len(BIASES)) + "|"]
    groups = {"want no call": lambda r: r["expected_calls"] == 0, "want one call": lambda r: r["expected_calls"] == 1,
              "want several calls": lambda r: r["expected_calls"] > 1}
    for name, want in groups.items():
        rs = [r for r in rows if want(r)]
        if not rs:
            continue
        gaps = [r["next"][0] - r["next"][1] for r in rs if r["next"]]
        lines.append(f"| {name} | {len(rs)} | {quartiles([r['first'] for r in rs])} | {sum(r['calls'] > 0 for r in rs)} | "
                     f"{quartiles(gaps)} | " + " | ".join(f"{sum(g + b > 0 for g in gaps)}/{len(gaps)}" for b in BIASES)
                     + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
