"""toolbridge's per-request logit rules as one vLLM logits processor: the `auto` call steering
(toolbridge.steer) and the loop guard of constrained calls (toolbridge.loops).

Installed, it loads through the `vllm.logits_processors` entry point; otherwise pass
`--logits-processors vllm_plugin.bias:CallBias`. Without it, requests still work, unsteered and
unguarded. It touches only requests whose sampling params carry the rules (set by the tool
parser's adjust_request). vLLM applies the structured-output mask before logits processors, so a
token the constraint forbids stays at -inf whatever is added here.
"""
from __future__ import annotations

from typing import Any, Callable

from vllm.v1.sample.logits_processor import AdapterLogitsProcessor

from toolbridge.loops import CLOSE_BIAS, LoopGuard, closers
from toolbridge.steer import Steering


class CallBias(AdapterLogitsProcessor):
    def __init__(self, vllm_config: Any, device: Any, is_pin_memory: bool):
        super().__init__(vllm_config, device, is_pin_memory)
        self._model_config = getattr(vllm_config, "model_config", None)
        self._tokenizer: Any = None
        self._closers: tuple[int, ...] = ()

    def is_argmax_invariant(self) -> bool:
        return False

    def _text(self) -> tuple[Callable[[list[int]], str], tuple[int, ...]]:
        """The model's detokenizer and its string-closing tokens (the guard reads text)."""
        if self._tokenizer is None:
            from vllm.tokenizers import cached_tokenizer_from_config

            self._tokenizer = cached_tokenizer_from_config(self._model_config)
            self._closers = closers(lambda t: self._tokenizer.encode(t, add_special_tokens=False))
        return self._tokenizer.decode, self._closers

    def new_req_logits_processor(self, params: Any) -> Callable | None:
        args = getattr(params, "extra_args", None)
        steering, guard = Steering.from_args(args), LoopGuard.from_args(args)
        if guard is not None and self._model_config is None:
            guard = None
        if steering is None and guard is None:
            return None
        decode, closing = self._text() if guard is not None else (None, ())
        read = [0]  # output tokens the guard has read

        def apply(output_ids: list[int], logits: Any) -> Any:
            if steering is not None and len(output_ids) < steering.horizon:
                for token, change in steering.changes(output_ids):
                    logits[token] += change
                only = steering.only(output_ids)
                kept = logits[list(only)].clone() if only is not None else None
                if kept is not None and bool(kept.isfinite().any()):  # else something else forbids them all
                    logits.fill_(float("-inf"))
                    logits[list(only)] = kept
            if guard is not None:
                new = [t for t in output_ids[read[0]:] if t >= 0]
                read[0] = len(output_ids)
                if new:
                    guard.feed(decode(new))
                if guard.looping:
                    logits[list(closing)] += CLOSE_BIAS
            return logits

        return apply
