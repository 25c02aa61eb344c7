"""The first-position call bias for `auto` (toolbridge.options), as a vLLM logits processor.

Installed, it loads through the `vllm.logits_processors` entry point; otherwise pass
`--logits-processors vllm_plugin.bias:CallBias`. Without it, requests still work, unbiased.
It touches only requests whose sampling params carry toolbridge's keys (set by the tool
parser's adjust_request), and only their first generated token.
"""
from __future__ import annotations

from typing import Any, Callable

from vllm.v1.sample.logits_processor import AdapterLogitsProcessor

IDS_KEY, BIAS_KEY = "toolbridge_bias_ids", "toolbridge_bias"


class CallBias(AdapterLogitsProcessor):
    def is_argmax_invariant(self) -> bool:
        return False

    def new_req_logits_processor(self, params: Any) -> Callable | None:
        args = getattr(params, "extra_args", None) or {}
        ids, bias = args.get(IDS_KEY), args.get(BIAS_KEY)
        if not ids or not bias:
            return None
        ids = [int(i) for i in ids]
        bias = float(bias)

        def first_token(output_ids: list[int], logits: Any) -> Any:
            if not output_ids:
                logits[ids] += bias
            return logits

        return first_token
