"""The accuracy table of the README: toolbridge on both engines next to what users run today.

Starts each server in turn on one model (`--model smollm2`, the embedded SmolLM2-135M-Instruct
GGUF, or `--model qwen`, the tool-trained Qwen2.5-Coder-0.5B-Instruct of bench/qwen.py; vLLM
serves the same weights converted to a Hugging Face directory), runs bench/accuracy/run.py's
questions against it and prints one table:

- vLLM + toolbridge: `--tool-call-parser toolbridge`, packaged ChatML template
- vLLM + hermes: `--tool-call-parser hermes` with vLLM's `examples/tool_chat_template_hermes.jinja`
  (not shipped in the wheel: pass its path with --hermes-template)
- llama.cpp + toolbridge: `python -m llamacpp_ext` (the model's own template behind the prelude;
  `-native`: with `tb_template: native`, the model's own tool template as it is, for models that
  have one)
- llama.cpp + chatml-function-calling: llama-cpp-python's own handler
- llama-server + toolbridge: stock `llama-server --jinja` with the packaged ChatML template
  (its own template analysis, parser and grammar; scripts/llama_server.sh builds it)
- llama-server + native: stock `llama-server --jinja` with the model's own template
- llama-server + toolbridge, steered (with `--server-bias B`): the same with llama-server's
  `--logit-bias` flag on the call marker's first token (every step, as llama-server applies it)
- vLLM + native: the model's own template with `--tool-call-parser hermes` (for models whose
  template has tools in Hermes form, as Qwen's has); `vllm-toolbridge-native`: the model's own
  template with `--tool-call-parser toolbridge`

    python bench/accuracy/compare.py --hermes-template tool_chat_template_hermes.jinja
    python bench/accuracy/compare.py --only llama-toolbridge,llama-chatml-fc
    python bench/accuracy/compare.py --only llama-toolbridge,llama-server-toolbridge,llama-server-native
    python bench/accuracy/compare.py --model qwen --max-tokens 256 --concurrency 4 \
        --only vllm-toolbridge,vllm-native,llama-toolbridge,llama-server-toolbridge,llama-server-native
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(Path(__file__).parent), str(ROOT / "bench")]

import qwen  # noqa: E402
import run  # noqa: E402
from servers import PYTHON, Server, free_port  # noqa: E402

MODEL = "model"  # the name every setup serves under


@dataclass(frozen=True)
class Model:
    gguf: Callable[[], Path]
    hf: Callable[[], Path]  # the same weights as a Hugging Face directory, for vLLM
    vllm_flags: tuple[str, ...]
    threads: int


def smollm2_gguf() -> Path:
    from toolbridge.serving.models import gguf_path

    return gguf_path()


def smollm2_hf() -> Path:
    from toolbridge.serving.models import hf_copy

    return hf_copy()


MODELS = {
    "smollm2": Model(smollm2_gguf, smollm2_hf, ("--dtype", "float32"), 1),
    "qwen": Model(qwen.gguf_path, qwen.hf_copy, ("--dtype", "bfloat16", "--enforce-eager"), 2),
}


def vllm_argv(model: Model, port: int, parser: str, template: Path | None) -> list[str]:
    return [PYTHON, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model.hf()),
            "--served-model-name", MODEL, "--host", "127.0.0.1", "--port", str(port), "--max-model-len", "4096",
            *model.vllm_flags, "--enable-auto-tool-choice", "--tool-call-parser", parser,
            *(["--chat-template", str(template)] if template else [])]


def llama_argv(model: Model, port: int, chat_format: str | None, *extra: str) -> list[str]:
    module, fmt = ("llamacpp_ext", []) if chat_format is None else ("llama_cpp.server", ["--chat_format", chat_format])
    fmt += list(extra)
    return [PYTHON, "-m", module, "--model", str(model.gguf()), *fmt, "--host", "127.0.0.1", "--port", str(port),
            "--n_ctx", "4096", "--n_threads", str(model.threads), "--n_threads_batch", str(model.threads),
            "--verbose", "false", "--model_alias", MODEL]


def llama_server_argv(model: Model, port: int, template: Path | None, bias: float = 0) -> list[str]:
    from servers import llama_server_binary

    argv = [llama_server_binary(), "-m", str(model.gguf()), "--jinja", "--host", "127.0.0.1", "--port", str(port),
            "-c", "4096", "-t", str(model.threads), "-tb", str(model.threads), "--alias", MODEL, "--no-webui"]
    if bias:
        argv += ["--logit-bias", f"{marker_token(model)}{bias:+g}"]
    return argv + (["--chat-template-file", str(template)] if template else [])


def marker_token(model: Model) -> int:
    """The token toolbridge's own steering favours: the default dialect's call marker's first
    (`<` of `<tool_call>` in SmolLM2)."""
    import llama_cpp

    from toolbridge.dialects import get_dialect
    from toolbridge.steer.steering import Steering

    vocab = llama_cpp.Llama(str(model.gguf()), vocab_only=True, verbose=False)
    encode = lambda t: vocab.tokenize(t.encode("utf-8"), add_bos=False, special=False)  # noqa: E731
    return Steering.for_dialect(get_dialect(None), encode, start_bias=1.0).call[0]


def setups(model: Model, hermes_template: Path | None, server_bias: float = 0) -> dict:
    """label -> (argv for a port, ready path, env). `-native` setups use the model's own template;
    `-steered` ones give llama-server a server-wide logit bias on the call marker's first token."""
    vllm_env = {"VLLM_CPU_KVCACHE_SPACE": "2"}
    chatml = ROOT / "templates" / "chatml.jinja"
    out = {"vllm-toolbridge": (lambda p: vllm_argv(model, p, "toolbridge", chatml), "/health", vllm_env)}
    if hermes_template:
        out["vllm-hermes"] = (lambda p: vllm_argv(model, p, "hermes", hermes_template), "/health", vllm_env)
    out["vllm-native"] = (lambda p: vllm_argv(model, p, "hermes", None), "/health", vllm_env)
    # toolbridge's parser, steering and grammars behind the model's own tool prompt
    out["vllm-toolbridge-native"] = (lambda p: vllm_argv(model, p, "toolbridge", None), "/health", vllm_env)
    # the default: the GGUF's own template behind the prelude; -native: its own tool template as it is
    out["llama-toolbridge"] = (lambda p: llama_argv(model, p, None), "/v1/models", {})
    out["llama-toolbridge-native"] = (lambda p: llama_argv(model, p, None, "--chat_template_kwargs",
                                                           json.dumps({"tb_template": "native"})), "/v1/models", {})
    out["llama-chatml-fc"] = (lambda p: llama_argv(model, p, "chatml-function-calling"), "/v1/models", {})
    out["llama-server-toolbridge"] = (lambda p: llama_server_argv(model, p, chatml), "/health", {})
    out["llama-server-native"] = (lambda p: llama_server_argv(model, p, None), "/health", {})
    if server_bias:
        out["llama-server-toolbridge-steered"] = (lambda p: llama_server_argv(model, p, chatml, server_bias),
                                                  "/health", {})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hermes-template", type=Path, help="vLLM's examples/tool_chat_template_hermes.jinja")
    ap.add_argument("--model", choices=sorted(MODELS), default="smollm2",
                    help="smollm2: the embedded SmolLM2-135M; qwen: Qwen2.5-Coder-0.5B-Instruct (bench/qwen.py)")
    ap.add_argument("--only", help="comma-separated labels to run")
    ap.add_argument("--server-bias", type=float, default=0,
                    help="adds llama-server-toolbridge-steered: llama-server with --logit-bias on the marker's token")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--out", type=Path, default=Path("accuracy-results.json"), help="results (JSON), per label")
    ap.add_argument("--logs", type=Path, help="directory for per-question results")
    ap.add_argument("--concurrency", type=int, default=1,
                    help="questions asked at a time on vLLM setups (it batches them; llama.cpp serves one at a time)")
    a = ap.parse_args(argv)
    chosen = setups(MODELS[a.model], a.hermes_template, a.server_bias)
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
            results[label] = run.run(server.base_url, MODEL, ["auto", "required"], a.max_tokens, {}, log,
                                     a.concurrency if label.startswith("vllm") else 1)
        a.out.write_text(json.dumps(results, indent=1))
    print(run.table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
