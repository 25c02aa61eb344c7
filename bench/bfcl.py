"""Berkeley Function Calling Leaderboard (BFCL) against any running OpenAI-compatible server.

Runs bfcl-eval's own `generate` and `evaluate` (its OpenAI chat-completions function-calling
handler, `OpenAICompletionsHandler`, and its own AST / relevance / multi-turn checkers) against
the server at --base-url, on N cases per category, and prints BFCL's per-category accuracy.

bfcl-eval pins its own dependencies, so it lives in its own venv (`.cache/bfcl-venv` under the
repository, made on first use: `pip install bfcl-eval==<--bfcl-version> soundfile`); this script
drives it through subprocesses and needs nothing but the standard library itself.

What it adds to bfcl, inside the bfcl venv, before bfcl's own CLI runs (see SHIM below):
- a model entry `toolbridge/<label>` in bfcl's registry (`MODEL_CONFIG_MAPPING`), an FC model
  whose handler is `OpenAICompletionsHandler` (as bfcl's own OpenAI-compatible entries are), with
  dots in function names sent as underscores (`underscore_to_dot`, as for OpenAI's models);
- `max_tokens` on every request (bfcl sends none, and a small model otherwise writes until its
  context is full), `extra_body` if given, and no client-side retries (a 500 is recorded as the
  case's error instead of being retried);
- the case choice: N cases per category spread evenly over bfcl's own order of the category
  (the middle of each of N equal slices), written to bfcl's `test_case_ids_to_generate.json` and
  run with `generate --run-ids`, then scored with `evaluate --partial-eval`.

Each run lives in its own directory (default `.cache/bfcl-runs/<label>`, bfcl's
`BFCL_PROJECT_ROOT`): bfcl's `result/` (raw model outputs) and `score/` (per-case verdicts),
and `run.json` with the settings, timings and the table's figures.

    python bench/bfcl.py run --base-url http://127.0.0.1:8011/v1 --label qwen-0.5b \\
        --categories live_simple,live_multiple,live_parallel,live_parallel_multiple,live_irrelevance \\
        --cases 12 --max-tokens 384
    python bench/bfcl.py run --base-url http://127.0.0.1:8000/v1 --label smollm2-json --model MODEL_NAME \\
        --categories live --cases 12 --extra-body '{"chat_template_kwargs": {"tb_dialect": "json"}}'
    python bench/bfcl.py show qwen-0.5b smollm2-json       # earlier runs side by side (labels or dirs)
    python bench/bfcl.py setup                             # only the venv
    python bench/bfcl.py requests --out reqs.jsonl         # bfcl's own requests, for bench/decisions.py

`--extra-body` reaches vLLM's per-request `chat_template_kwargs` (toolbridge's tb_* options);
`python -m llamacpp_ext` ignores them per request and takes them per model at start-up
(`--chat_template_kwargs '{"tb_dialect": "json"}'`): restart the server and give the run its own label.

Categories are bfcl's names (`bfcl test-categories`: simple_python, multiple, parallel,
parallel_multiple, irrelevance, live_simple, ..., multi_turn_base, ...) or its groups (`live`,
`non_live`, `multi_turn`, `python`, ...); `simple` means `simple_python`. The memory, web-search
and format-sensitivity categories are not supported (they need prerequisite runs or API keys).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".cache" / "bfcl-venv"
RUNS = ROOT / ".cache" / "bfcl-runs"
BFCL_VERSION = "2026.3.23"
ALIASES = {"simple": "simple_python"}
UNSUPPORTED = ("memory", "web_search", "format_sensitivity")

# Runs inside the bfcl venv: `python -c SHIM MODE [bfcl CLI args]`, settings in $TOOLBRIDGE_BFCL.
SHIM = r'''
import json, os, sys
cfg = json.loads(os.environ["TOOLBRIDGE_BFCL"])
from bfcl_eval.constants.model_config import MODEL_CONFIG_MAPPING, ModelConfig
from bfcl_eval.model_handler.api_inference.openai_completion import OpenAICompletionsHandler


class CappedOpenAICompletionsHandler(OpenAICompletionsHandler):
    """bfcl's own OpenAI chat-completions handler; every request also gets max_tokens (and
    extra_body), and the client does not retry (bfcl records the error as the case's answer)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.client = self.client.with_options(max_retries=0, timeout=cfg["timeout"])

    def generate_with_backoff(self, **kwargs):
        kwargs["max_tokens"] = cfg["max_tokens"]
        if cfg.get("extra_body"):
            kwargs["extra_body"] = cfg["extra_body"]
        return super().generate_with_backoff(**kwargs)


MODEL_CONFIG_MAPPING[cfg["registry"]] = ModelConfig(
    model_name=cfg["model"], display_name=cfg["registry"] + " (FC)", url=cfg["base_url"],
    org="toolbridge bench", license="n/a", model_handler=CappedOpenAICompletionsHandler,
    input_price=None, output_price=None, is_fc_model=True, underscore_to_dot=True)

mode = sys.argv[1]
if mode == "requests":  # bfcl's own first-turn request of each case (messages, tools) and its expected call count
    from bfcl_eval.utils import load_dataset_entry, load_ground_truth_entry, parse_test_category_argument
    handler = CappedOpenAICompletionsHandler(cfg["model"], 0.0, cfg["registry"], True)
    with open(cfg["out"], "w") as out:
        for category in parse_test_category_argument(cfg["categories"]):
            try:
                truth = {g["id"]: g["ground_truth"] for g in load_ground_truth_entry(category)}
            except Exception:  # irrelevance categories have none
                truth = {}
            for entry in load_dataset_entry(category):
                data = handler._compile_tools(handler._pre_query_processing_FC({}, entry), entry)
                data = handler.add_first_turn_message_FC(data, entry["question"][0])
                expected = truth.get(entry["id"])
                out.write(json.dumps({"id": entry["id"], "category": category, "messages": data["message"],
                                      "tools": data["tools"],
                                      "expected_calls": len(expected) if isinstance(expected, list) else 0}) + "\n")
elif mode == "select":
    from bfcl_eval.utils import load_dataset_entry, parse_test_category_argument
    chosen = {}
    order = []  # the order given, groups expanded (bfcl sorts them)
    for arg in cfg["categories"]:
        order += [c for c in parse_test_category_argument([arg]) if c not in order]
    for category in order:
        entries = load_dataset_entry(category)
        n, m = cfg["cases"], len(entries)
        picks = range(m) if n <= 0 or n >= m else sorted({(2 * i + 1) * m // (2 * n) for i in range(n)})
        chosen[category] = [entries[i]["id"] for i in picks]
    print(json.dumps(chosen))
else:
    from bfcl_eval.__main__ import cli
    sys.argv = ["bfcl", mode, *sys.argv[2:]]
    cli()
'''


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def installed_version(venv: Path) -> str | None:
    py = venv_python(venv)
    if not py.exists():
        return None
    r = subprocess.run([str(py), "-c", "import importlib.metadata as m; print(m.version('bfcl-eval'))"],
                       capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else None


def ensure_venv(venv: Path, version: str) -> Path:
    """The bfcl venv with bfcl-eval==version, made or upgraded on first use."""
    have = installed_version(venv)
    if have == version:
        return venv_python(venv)
    t0 = time.monotonic()
    if not venv_python(venv).exists():
        print(f"creating {venv} ...", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    print(f"installing bfcl-eval=={version} into {venv} (had: {have}) ...", file=sys.stderr)
    # soundfile: bfcl's CLI imports it (through its audio-capable handlers) but does not depend on it
    subprocess.run([str(venv_python(venv)), "-m", "pip", "install", "-q", f"bfcl-eval=={version}", "soundfile"],
                   check=True)
    print(f"installed in {time.monotonic() - t0:.0f} s", file=sys.stderr)
    return venv_python(venv)


def shim(py: Path, cfg: dict, project: Path, mode: str, *args: str, capture: bool = False,
         log=None) -> subprocess.CompletedProcess:
    env = {**os.environ, "TOOLBRIDGE_BFCL": json.dumps(cfg), "BFCL_PROJECT_ROOT": str(project),
           "OPENAI_BASE_URL": cfg["base_url"], "OPENAI_API_KEY": cfg["api_key"],
           "PYTHONUNBUFFERED": "1"}
    if capture:
        return subprocess.run([str(py), "-c", SHIM, mode, *args], env=env, cwd=project, capture_output=True,
                              text=True)
    return subprocess.run([str(py), "-c", SHIM, mode, *args], env=env, cwd=project, stdout=log,
                          stderr=subprocess.STDOUT, text=True)


def categories_arg(text: str) -> list[str]:
    cats = [ALIASES.get(c.strip(), c.strip()) for c in text.split(",") if c.strip()]
    bad = [c for c in cats if any(u in c for u in UNSUPPORTED)]
    if bad:
        raise SystemExit(f"not supported here: {', '.join(bad)} (they need prerequisite runs or API keys)")
    return cats


def read_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def collect(project: Path, registry: str, chosen: dict[str, list[str]]) -> dict[str, dict]:
    """Per category: bfcl's score header (accuracy, correct_count, total_count), plus from the result
    files the number of cases whose request failed and the summed request latency."""
    model_dir = registry.replace("/", "_")
    out = {}
    for category in chosen:
        row = {"cases": len(chosen[category])}
        for f in (project / "score" / model_dir).rglob(f"BFCL_v4_{category}_score.json"):
            header = read_lines(f)[0]
            row.update(accuracy=header["accuracy"], correct=header["correct_count"], total=header["total_count"])
        for f in (project / "result" / model_dir).rglob(f"BFCL_v4_{category}_result.json"):
            entries = read_lines(f)
            row["errors"] = sum(1 for e in entries if isinstance(e.get("result"), str)
                                and e["result"].startswith("Error during inference"))
            row["latency_s"] = round(sum(_latency(e.get("latency", 0)) for e in entries), 1)
        out[category] = row
    return out


def _latency(value) -> float:
    if isinstance(value, list):
        return sum(_latency(v) for v in value)
    return float(value or 0)


def run(args: argparse.Namespace) -> None:
    label = args.label
    registry = "toolbridge/" + re.sub(r"[^A-Za-z0-9.-]+", "-", label)  # bfcl maps dirs back with _ -> /
    project = Path(args.out) if args.out else RUNS / re.sub(r"[^A-Za-z0-9.-]+", "-", label)
    project.mkdir(parents=True, exist_ok=True)
    for sub in ("result", "score"):
        for f in sorted((project / sub).rglob("*"), reverse=True):
            f.unlink() if f.is_file() else f.rmdir()
    cfg = {"registry": registry, "model": args.model or label, "base_url": args.base_url.rstrip("/"),
           "api_key": args.api_key or os.environ.get("OPENAI_API_KEY") or "unused",
           "categories": categories_arg(args.categories), "cases": args.cases, "max_tokens": args.max_tokens,
           "timeout": args.timeout, "extra_body": json.loads(args.extra_body) if args.extra_body else None}
    py = ensure_venv(Path(args.venv), args.bfcl_version)

    if args.ids:  # the cases named, by category (bench/heuristics.py writes such a file)
        chosen = json.loads(Path(args.ids).read_text())
    else:
        r = shim(py, cfg, project, "select", capture=True)
        if r.returncode:
            raise SystemExit(f"selecting cases failed:\n{r.stderr[-3000:]}")
        chosen = json.loads(r.stdout.strip().splitlines()[-1])
    (project / "test_case_ids_to_generate.json").write_text(json.dumps(chosen, indent=1))
    print(f"{label}: {sum(map(len, chosen.values()))} cases in {', '.join(chosen)} -> {project}", file=sys.stderr)

    record = {"label": label, "registry": registry, "command": shlex.join([sys.executable, *sys.argv]),
              "bfcl_version": installed_version(Path(args.venv)),
              **{k: cfg[k] for k in ("model", "base_url", "max_tokens", "extra_body")},
              "temperature": args.temperature, "cases_per_category": args.cases, "ids": chosen,
              "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    with open(project / "bfcl.log", "w") as log:
        t0 = time.monotonic()
        g = shim(py, cfg, project, "generate", "--model", registry, "--temperature", str(args.temperature),
                 "--run-ids", "--allow-overwrite", "--num-threads", str(args.threads), log=log)
        t1 = time.monotonic()
        e = shim(py, cfg, project, "evaluate", "--model", registry, "--test-category", ",".join(chosen),
                 "--partial-eval", log=log)
        t2 = time.monotonic()
    record.update(generate_s=round(t1 - t0, 1), evaluate_s=round(t2 - t1, 1), generate_rc=g.returncode,
                  evaluate_rc=e.returncode, categories=collect(project, registry, chosen))
    (project / "run.json").write_text(json.dumps(record, indent=1))
    if g.returncode or e.returncode:
        print(f"bfcl exited {g.returncode} (generate) / {e.returncode} (evaluate); see {project / 'bfcl.log'}",
              file=sys.stderr)
    print(table([record]))
    print(f"\ngenerate {record['generate_s']:.0f} s, evaluate {record['evaluate_s']:.0f} s; "
          f"raw outputs in {project / 'result'}, verdicts in {project / 'score'}")


def cell(row: dict) -> str:
    if "accuracy" not in row:
        return "n/a"
    return f"{100 * row['accuracy']:.1f}% ({row['correct']}/{row['total']})"


def table(records: list[dict]) -> str:
    """BFCL's per-category accuracy; one column per run. With one run: also failed requests and
    the summed request time per category."""
    cats = list(dict.fromkeys(c for r in records for c in r["categories"]))
    if len(records) == 1:
        rows = ["| category | accuracy (correct/total) | failed requests | request time (s) |", "|---|---|---|---|"]
        for c in cats:
            row = records[0]["categories"][c]
            rows.append(f"| {c} | {cell(row)} | {row.get('errors', 'n/a')} | {row.get('latency_s', 'n/a')} |")
    else:
        rows = ["| category | " + " | ".join(r["label"] for r in records) + " |", "|---" * (len(records) + 1) + "|"]
        for c in cats:
            rows.append(f"| {c} | " + " | ".join(cell(r["categories"].get(c, {})) for r in records) + " |")
    means = []
    for r in records:
        accs = [r["categories"][c]["accuracy"] for c in cats if "accuracy" in r["categories"].get(c, {})]
        means.append(f"{100 * sum(accs) / len(accs):.1f}%" if accs else "n/a")
    rows.append("| unweighted mean of the categories above | " + " | ".join(means) + " |"
                + (" | |" if len(records) == 1 else ""))
    return "\n".join(rows)


def requests(args: argparse.Namespace) -> None:
    """Write bfcl's own first-turn requests (as its handler builds them) for the categories to a
    JSON-lines file: what bench/decisions.py reads."""
    cfg = {"registry": "toolbridge/requests", "model": "requests", "base_url": "http://unused/v1", "api_key": "unused",
           "categories": categories_arg(args.categories), "timeout": 60, "max_tokens": 0,
           "out": str(Path(args.out).resolve())}
    py = ensure_venv(Path(args.venv), args.bfcl_version)
    r = shim(py, cfg, Path(args.out).resolve().parent, "requests", capture=True)
    if r.returncode:
        raise SystemExit(f"writing requests failed:\n{r.stderr[-3000:]}")
    print(args.out)


def show(args: argparse.Namespace) -> None:
    records = []
    for d in args.runs:
        p = Path(d)
        p = p if p.suffix == ".json" else (p / "run.json" if p.exists() else RUNS / d / "run.json")
        records.append(json.loads(p.read_text()))
    print(table(records))
    for r in records:
        print(f"\n{r['label']}: {r['command']}\n  bfcl-eval {r['bfcl_version']}, max_tokens {r['max_tokens']}, "
              f"temperature {r['temperature']}, {r['cases_per_category']} cases/category, "
              f"extra_body {r['extra_body']}; generate {r['generate_s']:.0f} s, evaluate {r['evaluate_s']:.0f} s")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="generate and evaluate against a running server")
    r.add_argument("--base-url", required=True, help="the server's OpenAI base URL, e.g. http://127.0.0.1:8000/v1")
    r.add_argument("--label", required=True, help="name of this run (its column, its directory)")
    r.add_argument("--model", help="the model name sent in requests (default: the label)")
    r.add_argument("--categories", default="live_simple,live_multiple,live_parallel,live_parallel_multiple,"
                   "live_irrelevance", help="comma-separated bfcl categories or groups (default: %(default)s)")
    r.add_argument("--cases", type=int, default=12, help="cases per category, spread over it; 0 = all (default 12)")
    r.add_argument("--ids", help="a JSON file {category: [case ids]}: run these cases instead of --cases per category")
    r.add_argument("--max-tokens", type=int, default=384, help="max_tokens on every request (default 384)")
    r.add_argument("--temperature", type=float, default=0.0, help="default 0")
    r.add_argument("--extra-body", help="JSON merged into every request body, e.g. "
                   "'{\"chat_template_kwargs\": {\"tb_dialect\": \"json\"}}'")
    r.add_argument("--threads", type=int, default=1, help="concurrent requests (bfcl --num-threads, default 1)")
    r.add_argument("--timeout", type=float, default=600.0, help="per-request timeout in seconds (default 600)")
    r.add_argument("--api-key", help="default: $OPENAI_API_KEY or 'unused'")
    r.add_argument("--out", help="run directory (default .cache/bfcl-runs/<label>); its result/ and score/ are replaced")
    r.add_argument("--venv", default=str(VENV), help="bfcl's venv (default %(default)s)")
    r.add_argument("--bfcl-version", default=BFCL_VERSION, help="bfcl-eval version (default %(default)s)")
    s = sub.add_parser("show", help="print the table of one or more earlier runs side by side")
    s.add_argument("runs", nargs="+", help="run directories, run.json files or labels")
    q = sub.add_parser("requests", help="write bfcl's first-turn requests (messages, tools) to a JSON-lines file")
    q.add_argument("--categories", default="live_simple,live_multiple,live_parallel,live_parallel_multiple,"
                   "live_irrelevance")
    q.add_argument("--out", default=str(RUNS / "requests.jsonl"))
    q.add_argument("--venv", default=str(VENV))
    q.add_argument("--bfcl-version", default=BFCL_VERSION)
    v = sub.add_parser("setup", help="only make the bfcl venv")
    v.add_argument("--venv", default=str(VENV))
    v.add_argument("--bfcl-version", default=BFCL_VERSION)
    args = ap.parse_args(argv)
    if args.cmd == "run":
        run(args)
    elif args.cmd == "show":
        show(args)
    elif args.cmd == "requests":
        requests(args)
    else:
        print(ensure_venv(Path(args.venv), args.bfcl_version))


if __name__ == "__main__":
    main()
