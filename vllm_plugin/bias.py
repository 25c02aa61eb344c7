"""The `auto` call steering (toolbridge.steer) as a vLLM logits processor.

Installed, it loads through the `vllm.logits_processors` entry point; otherwise pass
`--logits-processors vllm_plugin.bias:CallBias`. Without it, requests still work, unbiased.
It touches only requests whose sampling params carry the steering (set by the tool parser's
adjust_request), and only within the steering's horizon at the answer's start.
"""
from __future__ import annotations

from typing import Any, Callable

from vllm.v1.sample.logits_processor import AdapterLogitsProcessor

from toolbridge.steer import Steering


class CallBias(AdapterLogitsProcessor):
    def is_argmax_invariant(self) -> bool:
        return False

    def new_req_logits_processor(self, params: Any) -> Callable | None:
        steering = Steering.from_args(getattr(params, "extra_args", None))
        if steering is None:
            return None

        def at_start(output_ids: list[int], logits: Any) -> Any:
            for token, change in steering.changes(output_ids):
                logits[token] += change
            return logits

        return at_start
