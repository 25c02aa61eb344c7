"""One steering rule on and off, on BFCL, re-running only the cases the rule can change.

A rule of toolbridge's policy (toolbridge.steer.policy) acts on a case only where it fires: the
unrelated-question bias where the question's words meet no tool's, the named-tool biases where a
question names tools, the argument formats where a tool's description states one, the made-up-value
check where an answer's first call has values the conversation does not hold. At temperature 0 a case
where the flipped rule cannot fire is answered exactly as in the base run. So a flipped run needs only
the cases where it can (plus a few where it cannot, as a check of that determinism), and the flipped
figures are the base run's verdicts with those cases' verdicts replaced:

    python bench/heuristics.py affected --base qwen-nl-base --requests .cache/bfcl-runs/requests-nonlive.jsonl \\
        --base-kwargs '{}' --flip '{"tb_word_checks": false}' --tool-trained --out ids.json
    (restart the server with the flipped option, then)
    python bench/bfcl.py run --ids ids.json --label qwen-nl-words-off ...
    python bench/heuristics.py merge --base qwen-nl-base --flipped qwen-nl-words-off

Which cases can change, per rule, from the plans toolbridge makes for base and flipped options
(toolbridge.request.prepare, the same code the servers run):
- the answer-start bias (`decisions.start_bias`) or the named tools (`decisions.asked`) differ;
- the grammar differs (a tool whose arguments get a stated format);
- the made-up-value check: on in the base, only a base answer without a call can have been changed
  by it (it only ever answers again without a call); off in the base, only an answer whose first
  call has values the flipped plan finds made up (toolbridge.request.ToolRequest.invented).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RUNS = ROOT / ".cache" / "bfcl-runs"

from toolbridge.events import ToolCall  # noqa: E402
from toolbridge.request import LAZY, prepare  # noqa: E402

CONTROLS = 2  # unaffected cases per category re-run as a check that they are answered the same


def run_dir(name: str) -> Path:
    p = Path(name)
    return p if p.is_dir() else RUNS / name


def results(run: Path) -> dict[str, object]:
    """Each case's raw answer in a run (bfcl's result files)."""
    out = {}
    for f in (run / "result").rglob("*_result.json"):
        for line in f.read_text().splitlines():
            row = json.loads(line)
            out[row["id"]] = row["result"]
    return out


def verdicts(run: Path) -> dict[str, bool]:
    """Each case's verdict in a run: right unless bfcl's score file lists it."""
    record = json.loads((run / "run.json").read_text())
    wrong = set()
    for f in (run / "score").rglob("*_score.json"):
        for line in f.read_text().splitlines()[1:]:
            wrong.add(json.loads(line)["id"])
    return {i: i not in wrong for ids in record["ids"].values() for i in ids}


def calls(result: object) -> list[tuple[str, str]]:
    """(name, arguments) of a bfcl result that holds calls; [] for text."""
    if not isinstance(result, list):
        return []
    out = []
    for item in result:
        if isinstance(item, dict):
            out += [(k, v if isinstance(v, str) else json.dumps(v)) for k, v in item.items()]
    return out


def changes(case: dict, result: object, base: dict, flipped: dict, tool_trained: bool) -> bool:
    """Whether flipping the options from `base` to `flipped` can change this case's answer. Up to the
    first token a rule moves, both runs write the same tokens: the start bias moves the first token;
    the named tools move what follows the first call (so the base answer's first call is written the
    same); a stated format moves the arguments of a call to its tool (so only answers that call it)."""
    fields = dict(tools=case["tools"], messages=case["messages"], tool_trained=tool_trained, env={})
    a, b = prepare(template_kwargs=base, **fields), prepare(template_kwargs=flipped, **fields)
    if a.mode != LAZY:
        return a.options != b.options
    written = calls(result)
    names = {t.name.replace(".", "_"): t.name for t in a.tools}
    called = [names.get(n.replace(".", "_"), n) for n, _ in written]
    moved = ("start_bias", "next_bias", "close_bias")
    if any(getattr(a.decisions, k) != getattr(b.decisions, k) for k in moved):
        return True
    if a.decisions.asked != b.decisions.asked and called:
        for asked in (a.decisions.asked, b.decisions.asked):
            if asked - {called[0]} or len(asked) > 1:
                return True
    for e, f in zip(a.entries, b.entries):
        if any(fa != fb and t.name in called for t, fa, fb in zip(e.tools, e.frames(), f.frames())):
            return True
    if a.grounded and not b.grounded:
        return not written
    if b.grounded and not a.grounded:
        return any(b.invented(ToolCall("", called[0], args)) for _, args in written[:1])
    return False


def affected(args: argparse.Namespace) -> None:
    base_run = run_dir(args.base)
    record = json.loads((base_run / "run.json").read_text())
    answers = results(base_run)
    cases = {}
    for line in Path(args.requests).read_text().splitlines():
        row = json.loads(line)
        cases[row["id"]] = row
    base, flipped = json.loads(args.base_kwargs), json.loads(args.flip)
    chosen, checks, total = {}, {}, 0
    for category, ids in record["ids"].items():
        hit = [i for i in ids if changes(cases[i], answers.get(i), base, flipped, args.tool_trained)]
        controls = [i for i in ids if i not in hit][:CONTROLS]
        chosen[category], checks[category] = hit + controls, controls
        total += len(hit)
        print(f"{category}: {len(hit)} of {len(ids)} can change (+{len(controls)} controls)", file=sys.stderr)
    Path(args.out).write_text(json.dumps({c: ids for c, ids in chosen.items() if ids}, indent=1))
    Path(args.out).with_suffix(".controls.json").write_text(json.dumps(checks, indent=1))
    print(f"{total} cases to re-run -> {args.out}", file=sys.stderr)


def merge(args: argparse.Namespace) -> None:
    base_run, flipped_run = run_dir(args.base), run_dir(args.flipped)
    base, flipped = verdicts(base_run), verdicts(flipped_run)
    base_answers, flipped_answers = results(base_run), results(flipped_run)
    record = json.loads((base_run / "run.json").read_text())
    rows = [f"| category | {args.base} | {args.flipped} (merged) | re-run | changed answers | controls the same |",
            "|---|---|---|---|---|---|"]
    for category, ids in record["ids"].items():
        merged = {i: flipped.get(i, base[i]) for i in ids}
        rerun = [i for i in ids if i in flipped]
        changed = [i for i in rerun if flipped_answers.get(i) != base_answers.get(i)]
        controls = json.loads(Path(args.controls).read_text()).get(category, []) if args.controls else []
        same = sum(flipped_answers.get(i) == base_answers.get(i) for i in controls)
        rows.append(f"| {category} | {sum(base[i] for i in ids)}/{len(ids)} | "
                    f"{sum(merged.values())}/{len(ids)} | {len(rerun)} | {len(changed)} | "
                    f"{same}/{len(controls)} |")
    print("\n".join(rows))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("affected", help="write the ids a flipped option can change (bench/bfcl.py run --ids)")
    a.add_argument("--base", required=True, help="the base run (label or directory)")
    a.add_argument("--requests", required=True, help="bfcl's requests (bench/bfcl.py requests)")
    a.add_argument("--base-kwargs", default="{}", help="the base run's toolbridge options (JSON)")
    a.add_argument("--flip", required=True, help="the flipped run's toolbridge options (JSON)")
    a.add_argument("--tool-trained", action="store_true", help="the served model's own template renders tools")
    a.add_argument("--out", required=True)
    m = sub.add_parser("merge", help="the flipped figures: the base run's verdicts, re-run cases replaced")
    m.add_argument("--base", required=True)
    m.add_argument("--flipped", required=True)
    m.add_argument("--controls", help="the .controls.json `affected` wrote beside its ids")
    args = ap.parse_args(argv)
    affected(args) if args.cmd == "affected" else merge(args)


if __name__ == "__main__":
    main()
