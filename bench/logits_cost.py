"""What toolbridge's vLLM logits processor costs per request-step, next to xgrammar's matcher.

Prints, at batch 1, 16, 64 and 256, the microseconds per request-step and per batch step of:
- `old`: the per-request processor this one replaced (kept below, as it was: a Python closure per
  request through vLLM's AdapterLogitsProcessor);
- `new`: vllm_plugin.processor.RulesProcessor, a batch LogitsProcessor;
- `xgr`: xgrammar's own matcher for the same answers (GrammarMatcher.fill_next_token_bitmask +
  accept_token per request-step, on the structural tag the tool parser sets),
for three answers with SmolLM2-135M-Instruct's real tokenizer and request arguments
(ToolbridgeToolParser.adjust_request):
- `auto text`: a prose answer under `auto`, timed past the steering horizon;
- `required`: a `required` call, every step (the guard reads the whole answer);
- `required+close`: the same with the argument close on (tb_close_bias 5.5, as for tool-trained
  models: the guard asks for the top token where the arguments may end).
Both processors are driven through vLLM's interface: a BatchUpdate adding the requests (each with
its own output-token list, appended to as the engine does), then update_state(None) + apply(logits)
per step on a float32 (batch, vocab) tensor. Figures are medians of several rounds, on a shared
machine: compare the ratios within one run. No assertions. The processor's torch work (the
argmax where the argument close decides, the writes) runs on `--threads` torch threads (1 by default).
`--qwen DIR` (a Qwen2.5 tokenizer in Hugging Face format) adds `Qwen required`: its `required` call,
with the argument close on as for every tool-trained model.

`--device cuda` runs the batch processor on CUDA logits (no `old` column) and prints, per answer and
batch, the µs per batch step synchronized (toolbridge, and xgrammar's own work for the same answer:
fill the bitmask, accept the token, apply the mask on the device), then the host syncs per step
(counted with torch.cuda.set_sync_debug_mode("warn")) and the steps that waited behind queued GPU
work: before each step, GPU work is queued as a pipelined engine's forward pass would be (1 ms, or 4x
the step's own time where longer), and a step waited where that work was done when `apply` returned.

    python bench/logits_cost.py [--rounds N] [--threads N] [--model DIR] [--qwen DIR] [--device cpu|cuda]
"""
from __future__ import annotations

import argparse
import statistics
import json
import sys
import time
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import xgrammar as xgr  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402
from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest  # noqa: E402
from vllm.v1.sample.logits_processor import AdapterLogitsProcessor, BatchUpdate  # noqa: E402

from toolbridge.steer.args import from_args  # noqa: E402
from toolbridge.steer.callguard import CallGuard, closers, enders  # noqa: E402
from toolbridge.steer.steering import Steering  # noqa: E402
from vllm_plugin import ToolbridgeToolParser  # noqa: E402
from vllm_plugin.processor import RulesProcessor  # noqa: E402

MODEL = Path.home() / ".cache" / "toolbridge" / "smollm2-135m-instruct-hf"
BATCHES = (1, 16, 64, 256)

# two of bench/accuracy's tools: the weather and a web search
_BENCH_TOOLS = json.loads((Path(__file__).resolve().parent / "accuracy" / "tools.json").read_text())
TOOLS = [{"type": "function", "function": {"name": n, **_BENCH_TOOLS[n]}} for n in ("get_weather", "search_web")]
QUESTION = [{"role": "user", "content": "What is the weather in Paris, and what should I pack for the trip?"}]
CALL = ('<tool_call>\n{"name": "search_web", "arguments": {"query": "what to pack for a spring weekend trip to '
        'Paris with rain in the forecast"}}\n</tool_call>')
PROSE = ("Paris in spring is usually mild, with daytime temperatures between 12 and 18 degrees Celsius and "
         "cooler evenings, so layers work best. Pack a light waterproof jacket or a compact umbrella, since "
         "short showers are common in April and May. Comfortable walking shoes matter more than anything "
         "else: most visitors walk ten or more kilometres a day between the museums, the river and the "
         "parks. A scarf and a warm sweater help at night, and a small day bag keeps your hands free on the "
         "metro. If you plan to visit churches, bring something that covers your shoulders. Finally, check "
         "the forecast the day before you leave, because the weather can change quickly at this time of year.")


class OldCallBias(AdapterLogitsProcessor):
    """vllm_plugin/processor.py before the batch processor (git history), verbatim but for the
    tokenizer, which it loads from here instead of a vLLM model config."""

    tokenizer: Any = None

    def __init__(self, vllm_config: Any, device: Any, is_pin_memory: bool):
        super().__init__(vllm_config, device, is_pin_memory)
        self._model_config = getattr(vllm_config, "model_config", None)
        self._tokenizer: Any = None
        self._closers: tuple[int, ...] = ()
        self._enders: tuple[tuple[int, str], ...] = ()

    def is_argmax_invariant(self) -> bool:
        return False

    def _text(self) -> Callable[[list[int]], str]:
        if self._tokenizer is None:
            tok = self.tokenizer
            encode = lambda t: tok.encode(t, add_special_tokens=False)  # noqa: E731
            self._closers, self._enders = closers(encode), enders(encode, lambda t: tok.decode([t]))
            self._tokenizer = tok
        return self._tokenizer.decode

    def new_req_logits_processor(self, params: Any) -> Callable | None:
        steering, guard = from_args(getattr(params, "extra_args", None))
        if guard is not None and self._model_config is None:
            guard = None
        if steering is None and guard is None:
            return None
        decode = self._text() if guard is not None else None
        read = [0]

        def apply(output_ids: list[int], logits: Any) -> Any:
            read[0] = reference_step(steering, guard, output_ids, logits, read[0], decode, self._closers, self._enders)
            return logits

        return apply


def reference_step(steering: Steering | None, guard: CallGuard | None, output_ids: list[int], logits: Any, read: int,
                   decode: Callable[[list[int]], str] | None, closer_ids: Any, ender_ids: Any) -> int:
    """The old processor's rule for one row at one step, verbatim (tests/test_call_bias.py holds the
    batch processor to it); returns how many output tokens the guard has now read."""
    if steering is not None and len(output_ids) < steering.horizon:
        for token, change in steering.changes(output_ids):
            logits[token] += change
        only = steering.only(output_ids)
        kept = logits[list(only)].clone() if only is not None else None
        if kept is not None and bool(kept.isfinite().any()):
            logits.fill_(float("-inf"))
            logits[list(only)] = kept
    if guard is not None:
        new = [t for t in output_ids[read:] if t >= 0]
        read = len(output_ids)
        if new:
            guard.feed(decode(new))
        for token, change in guard.changes(lambda: decode([int(logits.argmax())]), closer_ids, ender_ids):
            logits[token] += change
    return read


class NewCallBias(RulesProcessor):
    tokenizer: Any = None

    def _load_tokenizer(self) -> Any:
        return self.tokenizer


CONFIG = SimpleNamespace(model_config=SimpleNamespace())  # the old processor wants one to guard


def request_args(tok: Any, choice: str, **kwargs: Any) -> tuple[dict, str]:
    """The vLLM request arguments and structural tag the tool parser sets for this request."""
    req = ChatCompletionRequest.model_validate({"model": "m", "messages": QUESTION, "tools": TOOLS,
                                                "tool_choice": choice, **kwargs})
    ToolbridgeToolParser(tok).adjust_request(req)
    return dict(req.vllm_xargs), req.structured_outputs.structural_tag


def time_processor(cls: type, args: dict, tokens: list[int], skip: int, batch: int, vocab: int) -> float:
    """Seconds for one round: `batch` requests writing `tokens`, timed from step `skip` on."""
    proc = cls(CONFIG, torch.device("cpu"), False)
    outputs: list[list[int]] = [[] for _ in range(batch)]
    params = SimpleNamespace(extra_args=args)
    proc.update_state(BatchUpdate(batch_size=batch, removed=[], moved=[],
                                  added=[(i, params, [1, 2, 3], outputs[i]) for i in range(batch)]))
    logits = torch.randn(batch, vocab, generator=torch.Generator().manual_seed(batch))
    spent = 0.0
    for step, token in enumerate(tokens):
        if step >= skip:
            t0 = time.perf_counter()
            proc.update_state(None)
            proc.apply(logits)
            spent += time.perf_counter() - t0
        else:
            proc.update_state(None)
            proc.apply(logits)
        for out in outputs:
            out.append(token)
    return spent


def time_xgrammar(compiled: Any, tokens: list[int], skip: int, batch: int, vocab: int) -> float:
    matchers = [xgr.GrammarMatcher(compiled) for _ in range(batch)]
    bitmask = xgr.allocate_token_bitmask(batch, vocab)
    spent = 0.0
    for step, token in enumerate(tokens):
        t0 = time.perf_counter()
        for i, m in enumerate(matchers):
            m.fill_next_token_bitmask(bitmask, i)
        for m in matchers:
            if not m.accept_token(token):
                raise SystemExit(f"xgrammar rejects token {token} at step {step}")
        if step >= skip:
            spent += time.perf_counter() - t0
    return spent


def cuda_step_round(args: dict, tokens: list[int], skip: int, batch: int, vocab: int, device: torch.device,
                    queue_cycles: int = 0) -> tuple[float, int, int]:
    """One round of the batch processor on CUDA logits: (seconds of the steps from `skip` on, each
    synchronized; with `queue_cycles`, GPU work queued before each step and nothing synchronized:
    the host syncs counted, and the steps where the queued work was done when `apply` returned)."""
    proc = NewCallBias(CONFIG, device, True)
    outputs: list[list[int]] = [[] for _ in range(batch)]
    params = SimpleNamespace(extra_args=args)
    proc.update_state(BatchUpdate(batch_size=batch, removed=[], moved=[],
                                  added=[(i, params, [1, 2, 3], outputs[i]) for i in range(batch)]))
    base = torch.randn(batch, vocab, generator=torch.Generator().manual_seed(batch)).to(device)
    logits = torch.empty_like(base)
    spent, syncs, waited = 0.0, 0, 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step, token in enumerate(tokens):
            logits.copy_(base)
            torch.cuda.synchronize(device)
            if queue_cycles:
                torch.cuda._sleep(queue_cycles)  # a forward pass ahead of the processor
                queued = torch.cuda.Event()
                queued.record()
                torch.cuda.set_sync_debug_mode("warn")
            seen = len(caught)
            t0 = time.perf_counter()
            proc.update_state(None)
            proc.apply(logits)
            if queue_cycles:
                done = queued.query()
                torch.cuda.set_sync_debug_mode("default")
            else:
                torch.cuda.synchronize(device)
            took = time.perf_counter() - t0
            if step >= skip:
                spent += took
                syncs += sum("synchroniz" in str(w.message) for w in caught[seen:])
                waited += bool(queue_cycles and done)
            for out in outputs:
                out.append(token)
    return spent, syncs, waited


def cuda_xgrammar_round(compiled: Any, tokens: list[int], skip: int, batch: int, vocab: int,
                        device: torch.device) -> float:
    """xgrammar's per-step work for the same answers on CUDA logits, synchronized: fill the bitmask,
    move it to the device and apply it there, accept the token."""
    matchers = [xgr.GrammarMatcher(compiled) for _ in range(batch)]
    bitmask = xgr.allocate_token_bitmask(batch, vocab).pin_memory()
    logits = torch.randn(batch, vocab, device=device)
    spent = 0.0
    for step, token in enumerate(tokens):
        torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        for i, m in enumerate(matchers):
            m.fill_next_token_bitmask(bitmask, i)
        xgr.apply_token_bitmask_inplace(logits, bitmask.to(device, non_blocking=True))
        for m in matchers:
            if not m.accept_token(token):
                raise SystemExit(f"xgrammar rejects token {token} at step {step}")
        torch.cuda.synchronize(device)
        if step >= skip:
            spent += time.perf_counter() - t0
    return spent


def sleep_cycles_per_ms(device: torch.device) -> float:
    """How many torch.cuda._sleep cycles one millisecond of GPU time holds."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(1000)
    start.record()
    torch.cuda._sleep(10_000_000)
    end.record()
    torch.cuda.synchronize(device)
    return 10_000_000 / start.elapsed_time(end)


def cuda_table(cases: list, rounds: int, compilers: dict) -> None:
    device = torch.device("cuda")
    cycles = sleep_cycles_per_ms(device)
    print(f"device {torch.cuda.get_device_name(device)}, torch {torch.__version__}; median of {rounds} rounds; "
          f"µs per batch step synchronized; queued work before each step: 1 ms or 4x the step's time")
    print(f"{'answer':<20} {'batch':>5} | {'toolbridge':>10} {'xgrammar':>9} | {'syncs/step':>10} {'waited':>9}")
    for name, tok, args, tokens, skip, tag in cases:
        NewCallBias.tokenizer = tok
        vocab = len(tok)
        compiled = compilers[id(tok)].compile_structural_tag(tag)
        steps = len(tokens) - skip
        for batch in BATCHES:
            cuda_step_round(args, tokens, skip, batch, vocab, device)  # warm-up: tables, kernels
            new = statistics.median(cuda_step_round(args, tokens, skip, batch, vocab, device)[0]
                                    for _ in range(rounds)) / steps
            xg = statistics.median(cuda_xgrammar_round(compiled, tokens, skip, batch, vocab, device)
                                   for _ in range(max(2, rounds // 2))) / steps
            queue = int(cycles * max(1.0, 4 * new * 1e3))
            _, syncs, waited = cuda_step_round(args, tokens, skip, batch, vocab, device, queue)
            print(f"{name:<20} {batch:>5} | {new * 1e6:>10.1f} {xg * 1e6:>9.1f} | {syncs / steps:>10.2f} "
                  f"{waited:>4}/{steps:<4}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--model", default=str(MODEL))
    ap.add_argument("--qwen", default=None, help="a Qwen2.5 tokenizer directory: adds `Qwen required`")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (default 1: on a shared machine a parallel op over the logits can wait "
                         "milliseconds for its second core)")
    opts = ap.parse_args()
    if opts.threads:
        torch.set_num_threads(opts.threads)
    tok = AutoTokenizer.from_pretrained(opts.model)
    OldCallBias.tokenizer = NewCallBias.tokenizer = tok
    vocab = len(tok)
    info = xgr.TokenizerInfo.from_huggingface(tok, vocab_size=vocab)
    compiler = xgr.GrammarCompiler(info)
    compilers = {id(tok): compiler}
    encode = lambda t: tok.encode(t, add_special_tokens=False)  # noqa: E731

    auto_args, auto_tag = request_args(tok, "auto")
    req_args, req_tag = request_args(tok, "required")
    close_args, _ = request_args(tok, "required", chat_template_kwargs={"tb_close_bias": 5.5})
    horizon = from_args(auto_args)[0].horizon
    call, prose = encode(CALL), encode(PROSE)
    cases = [  # name, tokenizer, args, tokens, steps not timed, structural tag
        ("auto text", tok, auto_args, prose, horizon, auto_tag),
        ("required", tok, req_args, call, 0, req_tag),
        ("required+close", tok, close_args, call, 0, req_tag),
    ]
    if opts.qwen:
        qwen = AutoTokenizer.from_pretrained(opts.qwen)
        compilers[id(qwen)] = xgr.GrammarCompiler(xgr.TokenizerInfo.from_huggingface(qwen, vocab_size=len(qwen)))
        qwen_args, qwen_tag = request_args(qwen, "required")
        qwen_guard = from_args(qwen_args)[1]
        label = "Qwen required" + ("+close" if qwen_guard is not None and qwen_guard.close_bias else "")
        cases.append((label, qwen, qwen_args, qwen.encode(CALL, add_special_tokens=False), 0, qwen_tag))
    if opts.device == "cuda":
        cuda_table(cases, opts.rounds, compilers)
        return
    print(f"SmolLM2-135M-Instruct tokenizer, vocab {vocab}; call {len(call)} tokens, prose {len(prose)} tokens "
          f"(auto timed past the steering horizon, {horizon} tokens); median of {opts.rounds} rounds; "
          f"torch threads {torch.get_num_threads()}")
    print(f"{'answer':<15} {'batch':>5} | {'µs per request-step':^26} | {'µs per batch step':^29} | "
          f"{'new/old':>7} {'new/xgr':>7}")
    print(f"{'':<15} {'':>5} | {'old':>8} {'new':>8} {'xgr':>8} | {'old':>9} {'new':>9} {'xgr':>9} |")
    for name, tok, args, tokens, skip, tag in cases:
        OldCallBias.tokenizer = NewCallBias.tokenizer = tok
        vocab = len(tok)
        compiled = compilers[id(tok)].compile_structural_tag(tag)
        steps = len(tokens) - skip
        for batch in BATCHES:
            rounds = max(2, opts.rounds if batch < 256 else (opts.rounds + 1) // 2)
            per = {}
            for label, run in (("old", lambda: time_processor(OldCallBias, args, tokens, skip, batch, vocab)),
                               ("new", lambda: time_processor(NewCallBias, args, tokens, skip, batch, vocab)),
                               ("xgr", lambda: time_xgrammar(compiled, tokens, skip, batch, vocab))):
                per[label] = statistics.median(run() for _ in range(rounds)) / steps * 1e6  # µs per batch step
            req = {k: v / batch for k, v in per.items()}
            print(f"{name:<15} {batch:>5} | {req['old']:>8.2f} {req['new']:>8.2f} {req['xgr']:>8.2f} | "
                  f"{per['old']:>9.1f} {per['new']:>9.1f} {per['xgr']:>9.1f} | "
                  f"{req['new'] / req['old']:>7.2f} {req['new'] / req['xgr']:>7.2f}")


if __name__ == "__main__":
    main()
