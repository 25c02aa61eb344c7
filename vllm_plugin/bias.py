"""toolbridge's per-request logit rules as one vLLM logits processor: the `auto` call steering
(toolbridge.steer) and the guard of constrained calls (toolbridge.loops: loops, and optional
arguments nobody asked for).

Installed, it loads through the `vllm.logits_processors` entry point; otherwise pass
`--logits-processors vllm_plugin.bias:CallBias`. Without it, requests still work, unsteered and
unguarded. It touches only requests whose sampling params carry the rules (set by the tool
parser's adjust_request). vLLM applies the structured-output mask before logits processors, so a
token the constraint forbids stays at -inf whatever is added here.
"""
from __future__ import annotations

from typing import Any, Callable

from vllm.v1.sample.logits_processor import AdapterLogitsProcessor

from toolbridge.loops import LoopGuard, closers, enders
from toolbridge.steer import Steering


class CallBias(AdapterLogitsProcessor):
    def __init__(self, vllm_config: Any, device: Any, is_pin_memory: bool):
        super().__init__(vllm_config, device, is_pin_memory)
        self._model_config = getattr(vllm_config, "model_config", None)
        self._tokenizer: Any = None
        self._closers: tuple[int, ...] = ()
        self._enders: tuple[tuple[int, str], ...] = ()

    def is_argmax_invariant(self) -> bool:
        return False

    def _text(self) -> Callable[[list[int]], str]:
        """The model's detokenizer (the guard reads text); loads its closing tokens too."""
        if self._tokenizer is None:
            from vllm.tokenizers import cached_tokenizer_from_config

            tok = cached_tokenizer_from_config(self._model_config)
            encode = lambda t: tok.encode(t, add_special_tokens=False)  # noqa: E731
            self._closers, self._enders = closers(encode), enders(encode, lambda t: tok.decode([t]))
            self._tokenizer = tok
        return self._tokenizer.decode

    def new_req_logits_processor(self, params: Any) -> Callable | None:
        args = getattr(params, "extra_args", None)
        steering, guard = Steering.from_args(args), LoopGuard.from_args(args)
        if guard is not None and self._model_config is None:
            guard = None
        if steering is None and guard is None:
            return None
        decode = self._text() if guard is not None else None
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
                for token, change in guard.changes(lambda: decode([int(logits.argmax())]), self._closers,
                                                   self._enders):
                    logits[token] += change
            return logits

        return apply
