"""The first-position call bias for `auto` (toolbridge.options), as a vLLM logits processor.

Installed, it loads through the `vllm.logits_processors` entry point; otherwise pass
`--logits-processors vllm_plugin.bias:CallBias`. Without it, requests still work, unbiased.
It touches only requests whose sampling params carry toolbridge's keys (set by the tool
parser's adjust_request), and only at the answer's start (toolbridge.options.steer).
"""
from __future__ import annotations

from typing import Any, Callable

from vllm.v1.sample.logits_processor import AdapterLogitsProcessor

from toolbridge.options import steer

IDS_KEY, RESULT_KEY, BIAS_KEY = "toolbridge_bias_ids", "toolbridge_result_ids", "toolbridge_bias"


class CallBias(AdapterLogitsProcessor):
    def is_argmax_invariant(self) -> bool:
        return False

    def new_req_logits_processor(self, params: Any) -> Callable | None:
        args = getattr(params, "extra_args", None) or {}
        ids, bias = args.get(IDS_KEY), args.get(BIAS_KEY)
        if not ids or not bias:
            return None
        call = [int(i) for i in ids]
        result = [int(i) for i in args.get(RESULT_KEY) or []]
        bias = float(bias)
        horizon = max(1, len(result))

        def at_start(output_ids: list[int], logits: Any) -> Any:
            if len(output_ids) < horizon:
                for token, change in steer(call, result, bias, output_ids):
                    logits[token] += change
            return logits

        return at_start
