"""Streaming cost per token: toolbridge vs vLLM's built-in `hermes` parser, in one run.

Both parse the same long `<tool_call>` answer, token by token, through vLLM's own
`Parser.parse_delta` (what the OpenAI server calls for every engine output). Deltas come from
the real SmolLM2 tokenizer with incremental detokenization. Prints microseconds per token at
1k, 4k and 16k tokens and the hermes/toolbridge ratio.

    python bench/vllm_parser_cost.py
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from stream_cost import TOOLS, long_call  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402
from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest  # noqa: E402
from vllm.parser import ParserManager  # noqa: E402

import vllm_plugin  # noqa: E402,F401  (registers toolbridge)
from toolbridge.serving.models import gguf_path  # noqa: E402


def deltas_for(tok, text: str) -> list[tuple[str, list[int]]]:
    """(delta_text, delta_ids) per token, as vLLM's incremental detokenizer yields them."""
    ids = tok.encode(text, add_special_tokens=False)
    out, prev = [], ""
    offsets = tok(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    for i, (_, end) in enumerate(offsets):
        cur = text[:end]
        out.append((cur[len(prev):], ids[i:i + 1]))
        prev = cur
    assert "".join(d for d, _ in out) == text
    return out


def run(parser_cls, tok, request, deltas) -> tuple[float, str]:
    p = parser_cls(tok, request.tools, chat_template_kwargs={}, model_config=None)
    args = []
    t0 = time.perf_counter()
    last = len(deltas) - 1
    for n, (text, ids) in enumerate(deltas):
        d = p.parse_delta(text, ids, request, prompt_token_ids=[], finished=n == last)
        if d is not None:
            args.extend(tc.function.arguments or "" for tc in d.tool_calls if tc.function)
    return time.perf_counter() - t0, "".join(args)


def main() -> None:
    src = gguf_path()
    tok = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
    request = ChatCompletionRequest.model_validate(
        {"model": "x", "messages": [{"role": "user", "content": "write it"}], "tools": TOOLS, "stream": True})
    parsers = {name: ParserManager.get_parser(tool_parser_name=name, reasoning_parser_name=None,
                                              enable_auto_tools=True, tokenizer=tok)
               for name in ("hermes", "toolbridge")}
    print(f"{'tokens':>7} {'hermes us/tok':>14} {'toolbridge us/tok':>18} {'ratio':>6}")
    for n in (1_000, 4_000, 16_000):
        deltas = deltas_for(tok, long_call(n * 4 // 5))  # ~n tokens of this tokenizer
        per, out = {}, {}
        for name, cls in parsers.items():
            reps = max(1, 8_000 // n)
            best = min(run(cls, tok, request, deltas)[0] for _ in range(reps))
            per[name] = best / len(deltas) * 1e6
            out[name] = run(cls, tok, request, deltas)[1]
        same = "same args" if out["hermes"].replace(" ", "") == out["toolbridge"].replace(" ", "") else "ARGS DIFFER"
        print(f"{len(deltas):>7} {per['hermes']:>14.1f} {per['toolbridge']:>18.1f} "
              f"{per['hermes'] / per['toolbridge']:>5.1f}x  ({same})")


if __name__ == "__main__":
    main()
