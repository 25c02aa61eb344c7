"""llama.cpp's sampler under a prompt that opens a thinking block (SmolLM2, the embedded model): no rule
speaks inside the thinking, and the answer-start bias lands on the first token after `</think>`, whether
the model closed the block or the budget closed it for the model."""
from __future__ import annotations

import pytest

from servers import require

require("llama_cpp")
import llama_cpp  # noqa: E402

import itertools  # noqa: E402

import llamacpp_ext.generate as generate  # noqa: E402
import toolbridge.steer.rules as rules_module  # noqa: E402
from llamacpp_ext.__main__ import default_model  # noqa: E402
from llamacpp_ext.compat import end_tokens, vocabulary  # noqa: E402
from toolbridge.dialects import get_dialect  # noqa: E402
from toolbridge.steer.rules import AnswerRules  # noqa: E402
from toolbridge.steer.steering import Steering  # noqa: E402
from toolbridge.steer.thinking import ThinkingEnd  # noqa: E402
from toolbridge.thinking import DEFAULT_THINKING  # noqa: E402

PROMPT = "<|im_start|>user\nWhat is the weather in Paris?<|im_end|>\n<|im_start|>assistant\n<think>\n"


@pytest.fixture(scope="module")
def llama():
    return llama_cpp.Llama(default_model(), n_ctx=512, n_threads=1, n_threads_batch=1, verbose=False)


@pytest.mark.parametrize("budget", [4, 12])
def test_the_start_bias_lands_on_the_first_token_after_the_thinking(llama, monkeypatch, budget):
    encode = lambda text: llama.tokenize(text.encode(), add_bos=False, special=False)  # noqa: E731
    steering = Steering.for_dialect(get_dialect("tags"), encode, ["get_weather"], start_bias=5.0)
    spoke: list[tuple[int, list]] = []  # (tokens so far, the changes the rule asked for)
    rule = rules_module.token_changes

    def recorded(steer, answer, *rest):
        changes, only = rule(steer, answer, *rest)
        spoke.append((len(session.tokens), changes))
        return changes, only

    monkeypatch.setattr(rules_module, "token_changes", recorded)
    vocab = vocabulary(llama)
    end = ThinkingEnd.for_thinking(DEFAULT_THINKING, vocab.marker, budget)
    session = generate.Session(llama, PROMPT, llama.tokenize(PROMPT.encode(), special=True),
                               generate.Sampling(temp=0), seed=0, max_tokens=48, stop=[],
                               rules=AnswerRules(steering, None, vocab, end_tokens(llama), end))
    thought = "".join(session.think(DEFAULT_THINKING.close))
    start = session.start
    assert thought.endswith(DEFAULT_THINKING.close) and start > session.n_prompt
    assert len(session.tokens[session.n_prompt:start]) <= budget + len(encode(DEFAULT_THINKING.close))
    "".join(itertools.islice(session.phase(), 3))
    inside = [c for n, c in spoke if n < start]
    first = [c for n, c in spoke if n == start]
    assert not any(inside)
    assert first and {t for t, _ in first[0]} == set(steering.firsts) and all(b == 5.0 for _, b in first[0])
