"""A call start the bias chose, on llama.cpp's session with the real SmolLM2-135M: it stands only where the
model goes on to write the call start whole, and is taken back, leaving no trace, where the model goes on
with anything else (toolbridge.steer.steering.Steering.start_stands; llamacpp_ext.generate.Session).

Each case finds the model's own choices first (its greedy answer with no steering), then builds a
steering around them: a bias that flips the first token to one the model would not have written, and call
starts the model does or does not go on with. So what the model "would" do is measured, not assumed. The
core rule's cases for every dialect are in tests/test_steer.py; the served answers, in bench/answer_start.py.
"""
from __future__ import annotations

import pytest

from servers import require

require("llama_cpp")
import llama_cpp  # noqa: E402

from llamacpp_ext.compat import end_tokens, last_logits, vocabulary  # noqa: E402
from llamacpp_ext.generate import Sampling, Session  # noqa: E402
from toolbridge.serving.models import gguf_path  # noqa: E402
from toolbridge.steer.rules import AnswerRules  # noqa: E402
from toolbridge.steer.steering import Steering  # noqa: E402
from toolbridge.steer.thinking import ThinkingEnd  # noqa: E402
from toolbridge.thinking import DEFAULT_THINKING  # noqa: E402

PROMPT = "<|im_start|>user\nWrite two lines about autumn.<|im_end|>\n<|im_start|>assistant\n"
THINKING = PROMPT + "<think>\n"
GREEDY = Sampling(temp=0.0, repeat_penalty=1.0)


@pytest.fixture(scope="module")
def llama():
    # one thread: beside the servers the suite starts, two threads on two busy cores wait on each other
    return llama_cpp.Llama(str(gguf_path()), n_ctx=512, n_threads=1, n_threads_batch=1, verbose=False)


def text_of(llama, tokens) -> str:
    return llama.detokenize(tokens).decode("utf-8", "replace")


def tokens_of(llama, prompt: str) -> list[int]:
    return llama.tokenize(prompt.encode(), add_bos=False, special=True)


def answer(llama, prompt: str, steering: Steering | None, max_tokens: int = 12, think: bool = False) -> tuple[str, int]:
    """The answer's text after the prompt (after a thinking of 6 tokens, where `think`), and the tokens
    generated in all."""
    vocab = vocabulary(llama)
    end = ThinkingEnd.for_thinking(DEFAULT_THINKING, vocab.marker, 6) if think else None
    s = Session(llama, prompt, tokens_of(llama, prompt), GREEDY, seed=0, max_tokens=max_tokens, stop=[],
                rules=AnswerRules(steering, None, vocab, end_tokens(llama), end))
    if think:
        list(s.think(DEFAULT_THINKING.close))
    text = "".join(s.phase(triggers={t: False for t in steering.texts} if steering else {}))
    return text, s.completion_tokens


def own_tokens(llama, tokens: list[int], n: int) -> list[int]:
    """The model's own greedy tokens after `tokens`."""
    llama.reset()
    out: list[int] = []
    for _ in range(n):
        llama.eval(out[-1:] if out else tokens)
        out.append(int(last_logits(llama).argmax()))
    return out


def other_token(llama, own: int) -> int:
    """A token the model would not start with, whose text is plain ASCII (a made-up call start's first)."""
    for token in llama.tokenize(b" Q", add_bos=False, special=False)[::-1]:
        if token != own:
            return token
    raise AssertionError


def steering(first: int, texts: tuple[str, ...], bias: float = 100.0) -> Steering:
    return Steering(call=(first,), result=(), start_bias=bias, starts=(first,), texts=texts)


@pytest.mark.parametrize("think", [False, True], ids=["answer", "after thinking"])
def test_a_flipped_start_the_model_does_not_go_on_with_leaves_no_trace(llama, think):
    prompt = THINKING if think else PROMPT
    plain, _ = answer(llama, prompt, None, think=think)
    flip = other_token(llama, own_tokens(llama, tokens_of(llama, prompt), 1)[0])
    start = text_of(llama, [flip])
    assert not plain.lstrip().startswith(start.strip())  # the flip is the bias's, not the model's
    steered, used = answer(llama, prompt, steering(flip, (start + "\u2603\u2603",)), think=think)
    # taken back: the answer is the model's own, shorter by the tokens taken back (they count)
    assert steered and plain.startswith(steered) and steered != plain
    assert used == 12  # max_tokens, thinking included


def test_a_flipped_start_the_model_goes_on_with_becomes_the_start(llama):
    flip = other_token(llama, own_tokens(llama, tokens_of(llama, PROMPT), 1)[0])
    after = own_tokens(llama, tokens_of(llama, PROMPT) + [flip], 2)  # what the model writes after the flip
    start = text_of(llama, [flip, *after])
    steered, _ = answer(llama, PROMPT, steering(flip, (start,)))
    assert steered == start  # the whole start, written (a trigger: the call's grammar would take over)


def test_a_start_that_was_the_models_own_top_is_not_checked(llama):
    own = own_tokens(llama, tokens_of(llama, PROMPT), 1)[0]
    plain, _ = answer(llama, PROMPT, None)
    start = text_of(llama, [own]) + "\u2603\u2603"  # a call start the model never finishes
    steered, _ = answer(llama, PROMPT, steering(own, (start,), bias=5.0))
    assert steered == plain


def test_an_answer_cut_inside_the_biased_start_shows_none_of_it(llama):
    flip = other_token(llama, own_tokens(llama, tokens_of(llama, PROMPT), 1)[0])
    after = own_tokens(llama, tokens_of(llama, PROMPT) + [flip], 2)
    start = text_of(llama, [flip, *after]) + "\u2603"  # open after three tokens
    steered, used = answer(llama, PROMPT, steering(flip, (start,)), max_tokens=2)
    assert steered == "" and used == 2


def test_a_next_call_start_the_model_does_not_go_on_with_leaves_no_trace(llama):
    """Right after a call, the next-call bias speaks (toolbridge.steer.steering.Steering.after_call): a call
    start it chose where the model would have ended or written something else is taken back there too, leaving
    the model's own continuation; the tokens taken back count."""
    from toolbridge.request import prepare

    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
    vocab = vocabulary(llama)

    def after_call(next_bias: float) -> tuple[str, int]:
        req = prepare(tools=tools, tool_choice="auto", messages=[{"role": "user", "content": "Weather in Paris?"}],
                      template_kwargs={"tb_call_bias": 0.0, "tb_next_bias": next_bias}, env={})
        rules = req.rules(vocab, end_tokens(llama), thinking=False)
        s = Session(llama, PROMPT, tokens_of(llama, PROMPT), GREEDY, seed=0, max_tokens=40, stop=[], rules=rules)
        list(s.write(call))
        rules.read(s.tokens[s.n_prompt:], call)  # the call, read as if generated
        assert rules.guard.between
        text = "".join(s.phase(triggers={"<tool_call>": False}))
        return text, s.completion_tokens

    own = own_tokens(llama, tokens_of(llama, PROMPT + call), 1)[0]
    assert not text_of(llama, [own]).startswith("<")  # the model itself would not start another call here
    plain, plain_used = after_call(0.0)
    steered, steered_used = after_call(100.0)
    assert steered == plain and "<" not in steered
    assert steered_used > plain_used  # the bias's start was written, then taken back
