"""toolbridge's reasoning parser on vLLM without a server: through the parser vLLM composes from it and
the toolbridge tool parser (vllm.parser.ParserManager, as `--reasoning-parser toolbridge
--tool-call-parser toolbridge` do), with SmolLM2's tokenizer, for which `<think>` is plain text.

The API server's half (thinking -> `reasoning`, the rest to the tool parser, whole and streamed for any
split) and the engine's half (where structured output starts: the prompt's end, the close marker's
last token)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servers import ROOT, require, smollm2_hf
from toolsets import TOOLS

require("vllm")
from transformers import AutoTokenizer  # noqa: E402
from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest  # noqa: E402
from vllm.parser.parser_manager import ParserManager  # noqa: E402

import vllm_plugin  # noqa: E402,F401  (registers both parsers)
from vllm_plugin.reasoning import ToolbridgeReasoningParser  # noqa: E402

TOKENIZER = AutoTokenizer.from_pretrained(str(smollm2_hf()))
OPENS = "<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n<think>\n"
PLAIN = "<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n"
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
ANSWERS = [
    "The user asks for Paris. I should call <tool_call> get_weather.\n</think>\n\n" + CALL,
    "Hmm {\"name\": \"x\"} </thi nk> still thinking</think>It is sunny.",
    "cut short, no close marker <tool_call>\n{\"name\": \"get_weather\"",
    "</think>" + CALL + "\nDone.",
    "Paris is in France.\n</think>\n\n  It is sunny in Paris.",
]


def ids(text: str) -> list[int]:
    return TOKENIZER.encode(text, add_special_tokens=False)


def parser(tool_choice="auto"):
    cls = ParserManager.get_parser(tool_parser_name="toolbridge", reasoning_parser_name="toolbridge",
                                   enable_auto_tools=True)
    req = ChatCompletionRequest.model_validate({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                                                "tools": TOOLS, "tool_choice": tool_choice})
    p = cls(TOKENIZER, req.tools)
    p.adjust_request(req)
    return p, req


def whole(prompt: str, text: str):
    p, req = parser()
    p.set_prompt_token_ids(ids(prompt))
    reasoning, content, calls = p.parse(text, req, enable_auto_tools=True)
    return reasoning or "", content or "", [(c.name, json.loads(c.arguments)) for c in calls or []]


def streamed(prompt: str, text: str, cuts: list[int]):
    p, req = parser()
    reasoning, content, calls = "", "", {}
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)]) if b > a]
    for k, piece in enumerate(pieces):
        d = p.parse_delta(piece, ids(piece), req, ids(prompt), finished=k == len(pieces) - 1)
        if d is None:
            continue
        reasoning += d.reasoning or ""
        content += d.content or ""
        for tc in d.tool_calls or []:
            call = calls.setdefault(tc.index, ["", ""])
            if tc.function and tc.function.name:
                call[0] = tc.function.name
            if tc.function and tc.function.arguments:
                call[1] += tc.function.arguments
    return reasoning, content, [(n, json.loads(a)) for n, a in calls.values()]


def test_the_thinking_is_reasoning_and_the_call_after_it_a_call():
    reasoning, content, calls = whole(OPENS, ANSWERS[0])
    assert reasoning.startswith("The user asks") and "<tool_call>" in reasoning and "</think>" not in reasoning
    assert calls == [("get_weather", {"city": "Paris"})] and not content.strip()


def test_a_call_inside_the_thinking_stays_reasoning():
    reasoning, content, calls = whole(OPENS, ANSWERS[2])
    assert reasoning == ANSWERS[2] and not content and not calls


def test_a_prompt_that_does_not_think_keeps_its_answer_whole():
    """No block open: the marker is the answer's text, as with no reasoning parser (the tool parser
    reads the answer; the call after it is a call)."""
    reasoning, content, calls = whole(PLAIN, ANSWERS[3])
    assert not reasoning and calls == [("get_weather", {"city": "Paris"})]


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(range(len(ANSWERS))), st.lists(st.integers(1, 200), max_size=12, unique=True))
def test_streamed_equals_whole_for_any_split(which, cuts):
    text = ANSWERS[which]
    cuts = sorted(c for c in cuts if c < len(text))
    assert streamed(OPENS, text, cuts) == whole(OPENS, text)


def test_the_engine_starts_structured_output_after_the_close_marker():
    """vLLM's structured-output manager asks the parser of the prompt, then of each step's tokens."""
    r = ToolbridgeReasoningParser(TOKENIZER)
    assert not r.is_reasoning_end(ids(OPENS)) and r.is_reasoning_end(ids(PLAIN))
    out = ids(OPENS) + ids("Let me think.</think>\n" + CALL)
    marker_done = next(k for k in range(len(ids(OPENS)), len(out)) if "</think>" in TOKENIZER.decode(out[:k + 1]))
    ends = [k for k in range(len(ids(OPENS)), len(out)) if r.is_reasoning_end_streaming(out[:k + 1], out[k:k + 1])]
    assert ends == [marker_done]
    assert r.is_reasoning_end_streaming(out, out[len(ids(OPENS)):])  # several tokens at once (speculative)


def test_the_reasoning_parser_loads_by_file_path_and_by_entry_point():
    check = "\nfrom vllm.reasoning import ReasoningParserManager\nprint(ReasoningParserManager.get_reasoning_parser('toolbridge').__name__)"
    path = ROOT / "vllm_plugin" / "reasoning.py"
    for code in (f"import sys; sys.path.insert(0, {str(ROOT)!r})\nfrom vllm.reasoning import ReasoningParserManager\n"
                 f"ReasoningParserManager.import_reasoning_parser({str(path)!r})",
                 "from vllm.plugins import load_general_plugins\nload_general_plugins()"):
        r = subprocess.run([sys.executable, "-c", code + check], capture_output=True, text=True, cwd="/")
        assert r.stdout.strip().endswith("ToolbridgeReasoningParser"), r.stderr[-2000:]


def test_beside_vllms_own_parser_where_the_markers_are_tokens():
    """A tokenizer with `<think>` and `</think>` as special tokens: vLLM's deepseek_r1 parser takes it, and
    toolbridge's logits processor reads the same markers from those tokens' text (a prompt left open, the
    close in one token)."""
    from vllm.reasoning import ReasoningParserManager

    from toolbridge.steer.thinking import PROMPT_TAIL, ThinkingEnd
    from toolbridge.steer.vocab import hf_vocabulary
    from toolbridge.thinking import DEFAULT_THINKING

    tok = AutoTokenizer.from_pretrained(str(smollm2_hf()))
    tok.add_special_tokens({"additional_special_tokens": ["<think>", "</think>"]})
    ReasoningParserManager.get_reasoning_parser("deepseek_r1")(tok)  # refuses a tokenizer without them
    vocab = hf_vocabulary(tok)
    end = ThinkingEnd.for_thinking(DEFAULT_THINKING, vocab.encode, budget=4)
    assert len(end.tokens) == 1 and vocab.text(end.tokens[0]) == "</think>"
    prompt = tok.encode(OPENS, add_special_tokens=False)
    assert end.opened_by(vocab.join(prompt[-PROMPT_TAIL:]))
    assert not end.feed(vocab.text(tok.encode("Let", add_special_tokens=False)[0])) and end.feed(vocab.text(end.tokens[0]))


@pytest.mark.parametrize("extra, budget", [({}, None), ({"reasoning_effort": "low"}, 1024),
                                           ({"thinking_token_budget": 6}, 6),
                                           ({"thinking_token_budget": 6, "reasoning_effort": "high"}, 6),
                                           ({"chat_template_kwargs": {"tb_thinking_budget": 3},
                                             "thinking_token_budget": 6}, 3)])
def test_the_budget_a_request_asks_for_reaches_the_logits_processor(extra, budget):
    """tb_thinking_budget over vLLM's thinking_token_budget over the reasoning effort; the processor
    holds it, so vLLM's own budget field is taken out of the request."""
    from toolbridge.steer.args import thinking_from_args
    from vllm_plugin import ToolbridgeToolParser

    req = ChatCompletionRequest.model_validate({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                                                "tools": TOOLS, "tool_choice": "required", **extra})
    ToolbridgeToolParser(TOKENIZER).adjust_request(req)
    end = thinking_from_args(req.vllm_xargs)
    assert end.budget == budget and end.forced and req.thinking_token_budget is None
