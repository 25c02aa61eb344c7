"""Both engines drive one rules object per answer (toolbridge.steer.rules.AnswerRules), so one token stream,
fed as each adapter feeds it, gets the same decisions step for step: vLLM's batch logits processor
(vllm_plugin.processor.RulesProcessor.apply, one row) and llama.cpp's session (llamacpp_ext.generate.Session.think and
phase, its sampler's `next`) each make the rules from the request's plan their own way (packed into vLLM's
request arguments; `ToolRequest.rules` on llama.cpp) and read the same tokens. The decisions: the answer's
start (the start bias, after the thinking where there is one), the thinking's end (the budget's close
marker), a forced answer's end held back inside the thinking, the bias after a call, and the end after calls.
With thinking and without, under `auto`, `required` and a named tool.

The model is the real SmolLM2-135M on both sides: its GGUF in llama.cpp, its tokenizer (read from the same
GGUF by transformers, as vLLM's copy of it is made) for vLLM, so the ids are the same. The stream is scripted:
each engine's sampler is told which token comes next, so that the two read the same tokens whatever their
logits. The one place the engines differ on purpose is a call start the bias chose: vLLM holds the answer to
it (it cannot take a token back) while llama.cpp would take it back; the test checks that vLLM's holds fall
exactly where that start is still undecided.
"""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from servers import require

require("vllm")
require("llama_cpp")
import llama_cpp  # noqa: E402
import torch  # noqa: E402
from vllm.v1.sample.logits_processor import BatchUpdate  # noqa: E402

import llamacpp_ext.generate as generate  # noqa: E402
import vllm_plugin.processor as processor  # noqa: E402
from llamacpp_ext.compat import detokenize, end_tokens, vocabulary  # noqa: E402
from toolbridge.request import prepare  # noqa: E402
from toolbridge.serving.models import gguf_path  # noqa: E402
from toolbridge.steer.logits import Gated  # noqa: E402
from toolbridge.steer.rules import AnswerRules  # noqa: E402
from toolbridge.steer.steering import BAN  # noqa: E402
from toolbridge.steer.vocab import hf_vocabulary  # noqa: E402
from toolbridge.thinking import DEFAULT_THINKING  # noqa: E402

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
PROMPT = "<|im_start|>user\nWhat is the weather in Paris?<|im_end|>\n<|im_start|>assistant\n"
THOUGHT = "The user wants the weather, so I call the tool."
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
CHOICES = {"auto": "auto", "required": "required",
           "named": {"type": "function", "function": {"name": "get_weather"}}}


@pytest.fixture(scope="module")
def llama():
    return llama_cpp.Llama(str(gguf_path()), n_ctx=512, n_threads=1, n_threads_batch=1, verbose=False)


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    gguf = gguf_path()
    return AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)


def plan(choice: str, budget: int | None):
    options = {"tb_next_bias": 3.0, **({"tb_thinking_budget": budget} if budget is not None else {})}
    return prepare(tools=TOOLS, tool_choice=CHOICES[choice], messages=[{"role": "user", "content": "Weather?"}],
                   template_kwargs=options, env={})


def decision(changes, only) -> tuple:
    """A step's decision, comparable across engines: its changes (summed per token) and its hold."""
    summed: dict[int, float] = {}
    for t, c in changes:
        summed[t] = summed.get(t, 0.0) + c
    hold = None if only is None else (
        ("gated", tuple(sorted(only)), tuple(sorted(only.otherwise))) if isinstance(only, Gated) else tuple(sorted(only)))
    return tuple(sorted(summed.items())), hold


def vllm_decisions(monkeypatch, tokenizer, req, prompt: str, stream: list[int], ends: tuple[int, ...]) -> list:
    """Each step's decision of vLLM's processor for one row writing `stream`, and whether that row's start
    was undecided at it."""
    class Processor(processor.RulesProcessor):
        def _load_tokenizer(self):
            return tokenizer

    proc = Processor(SimpleNamespace(model_config=None), torch.device("cpu"), False)
    vocab = hf_vocabulary(tokenizer)
    steps: list = []

    def recorded(logits, edits, array):
        steps[-1] = decision(*next(((c, o) for r, c, o in edits if r == 0), ([], None)))
        return write(logits, edits, array)

    write = processor.write
    monkeypatch.setattr(processor, "write", recorded)
    params = SimpleNamespace(extra_args=req.logit_args(vocab, start_held=True), all_stop_token_ids=list(ends))
    out: list[int] = []
    proc.update_state(BatchUpdate(1, [], [(0, params, tokenizer.encode(prompt, add_special_tokens=False), out)], []))
    undecided: list[bool] = []
    for token in stream:
        steps.append(decision([], None))
        proc.update_state(None)
        row = proc._answers.get(0)
        opened = row is not None and row.rules.opened is not None
        proc.apply(torch.zeros(1, len(tokenizer)))
        undecided.append(opened and row.rules.opened is not None)  # held to the start or the end this step
        out.append(token)
    monkeypatch.undo()
    return steps, undecided


def llamacpp_decisions(monkeypatch, llama, req, prompt: str, stream: list[int], thinking: bool) -> list:
    """Each step's decision of llama.cpp's session writing `stream` (its sampler told each next token). A token
    the session writes for the model instead of sampling it (the thinking's close marker at the budget: the
    tokens the rules hold the answer to, evaluated at once) is recorded as held to itself."""
    steps: dict[int, tuple] = {}
    write = generate.write

    def recorded(logits, edits, array):
        steps[at[0]] = decision(*edits[0][1:])
        return write(logits, edits, array)

    def scripted_next(self, tokens):
        at[0] = len(tokens) - n_prompt
        steps[at[0]] = decision([], None)
        real_pick, real_sample = generate.Sampler._pick, generate.sample_in_c
        token = stream[at[0]]
        try:
            generate.Sampler._pick = lambda self, logits, grammar_first: token
            generate.sample_in_c = lambda llama, chain: token
            return real_next(self, tokens)
        finally:
            generate.Sampler._pick, generate.sample_in_c = real_pick, real_sample

    at = [0]
    real_next = generate.Sampler.next
    monkeypatch.setattr(generate, "write", recorded)
    monkeypatch.setattr(generate.Sampler, "next", scripted_next)
    vocab = vocabulary(llama)
    tokens = llama.tokenize(prompt.encode(), add_bos=False, special=True)
    n_prompt = len(tokens)
    session = generate.Session(llama, prompt, tokens, generate.Sampling(temp=0.0, repeat_penalty=1.0), seed=0,
                               max_tokens=len(stream), stop=[], rules=req.rules(vocab, end_tokens(llama), thinking))
    if thinking:
        list(session.think(DEFAULT_THINKING.close))
        assert session.ended == generate.TRIGGER
    list(session.phase())
    monkeypatch.undo()
    written = session.tokens[n_prompt:]
    assert written == stream[:len(written)]
    return [steps[k] if k in steps else ((), (written[k],)) for k in range(len(stream))]


@pytest.mark.parametrize("thinking", [False, True], ids=["no thinking", "thinking"])
@pytest.mark.parametrize("choice", list(CHOICES))
def test_one_token_stream_gets_the_same_decisions_on_both_engines(monkeypatch, llama, tokenizer, choice, thinking):
    encode = lambda text: tokenizer.encode(text, add_special_tokens=False)  # noqa: E731
    assert encode(THOUGHT + CALL) == llama.tokenize((THOUGHT + CALL).encode(), add_bos=False, special=False)
    ends = end_tokens(llama)
    # the thought's budget is its own length: the close marker is then held, token by token, as written
    budget = len(encode(THOUGHT)) if thinking else None
    req = plan(choice, budget)
    prompt = PROMPT + (DEFAULT_THINKING.open + "\n" if thinking else "")
    answer = encode(CALL + "\nThat is all.")
    stream = (encode(THOUGHT) + encode(DEFAULT_THINKING.close) if thinking else []) + answer + [ends[0]]

    on_vllm, undecided = vllm_decisions(monkeypatch, tokenizer, req, prompt, stream, ends)
    on_llamacpp = llamacpp_decisions(monkeypatch, llama, req, prompt, stream, thinking)

    assert len(on_vllm) == len(on_llamacpp) == len(stream)
    held = []  # the steps where vLLM holds a start the bias chose, undecided, that llama.cpp would take back
    for step, (v, c, open_start) in enumerate(zip(on_vllm, on_llamacpp, undecided)):
        if v != c:
            assert open_start and v[0] == c[0] and c[1] is None and v[1][0] == "gated", (step, v, c)
            held.append(step)
    # the decisions the test is about were made at all
    first = len(encode(THOUGHT)) + len(encode(DEFAULT_THINKING.close)) if thinking else 0
    banned = {t for t, c in on_llamacpp[0][0] if c < -1000}
    if thinking:
        assert on_llamacpp[budget][1] == (encode(DEFAULT_THINKING.close)[0],)  # the budget closes the thinking
        assert (banned == set(ends)) == (choice != "auto")  # a forced answer does not end inside it
    if choice == "auto":
        assert any(c > 0 for _, c in on_llamacpp[first][0])  # the start bias
        after = first + len(encode(CALL))
        assert any(isinstance(d[1], tuple) and d[1][:1] == ("gated",) for d in on_llamacpp[after - 3:after + 2])
        assert held and held[0] == first + 1  # the call start the start bias chose, from its second token
    else:
        assert not held and not on_llamacpp[first][0]


def test_both_engines_read_the_same_text_for_every_token(llama, tokenizer):
    """The rules read each token's text from their engine's vocabulary: llama.cpp's (`llama_token_to_piece`,
    read whole: llama-cpp-python's own detokenize drops a piece over 32 bytes) and vLLM's (the Hugging Face
    tokenizer's) agree on every token but the special ones, which have no text in an answer on llama.cpp."""
    ours, theirs = vocabulary(llama).texts, hf_vocabulary(tokenizer).texts
    special = {t for t, added in tokenizer.added_tokens_decoder.items() if added.special}
    differ = [t for t in range(len(theirs)) if ours[t] != theirs[t] and t not in special]
    assert len(ours) == len(theirs) and not differ, [(t, ours[t], theirs[t]) for t in differ[:5]]
    long = "def f():\n" + " " * 64 + "return 1\n" + "-" * 64
    tokens = llama.tokenize(long.encode(), add_bos=False, special=False)
    assert detokenize(llama, tokens).decode() == long


def test_an_answer_asked_again_in_text_has_every_call_opening_banned_at_every_step_on_both_engines(llama, tokenizer):
    """A first call that made its values up is answered again in text (ToolRequest.in_text): on both engines
    the same rules object bans every call opening at every step, with no steering and no call guard."""
    req = plan("auto", None)
    ends = end_tokens(llama)
    openings = req.steering(vocabulary(llama)).openings
    assert openings == req.steering(hf_vocabulary(tokenizer)).openings
    on_llamacpp = req.in_text().rules(vocabulary(llama), ends, thinking=False)
    on_vllm = AnswerRules.unpack(req.in_text().logit_args(hf_vocabulary(tokenizer)), hf_vocabulary(tokenizer), ends,
                                 lambda: "")
    for rules in (on_llamacpp, on_vllm):
        assert rules.steering is None and rules.guard is None and rules.ruled
        for token in tokenizer.encode('Sure: {"a": 1} and <tool_call> as text.', add_special_tokens=False):
            changes, only = rules.next()
            assert sorted(changes) == sorted((t, BAN) for t in openings) and only is None
            rules.read((token,))
