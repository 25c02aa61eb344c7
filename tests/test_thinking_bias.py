"""vLLM's batch logits processor under a prompt that opens a thinking block: every rule (the start
bias, the guard, the argument close, the hold after calls) counts from the first token after the
close marker, and the budget writes the marker for the model.

Each answer is run twice through vLLM's interface: once as a request whose prompt opened the thinking
(thinking text, `</think>`, then the answer), once as the same request without it (the answer alone,
as before thinking existed). Inside the thinking nothing changes; from the first token after it the
logits changes are the second run's, step for step. On the CPU (the top token read on the host and on
the device) and on `meta` logits (nothing read back)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servers import require

require("vllm")
import torch  # noqa: E402
from vllm.v1.sample.logits_processor import BatchUpdate  # noqa: E402

from toolbridge.steer.args import ARG, thinking_from_args, to_args  # noqa: E402
from toolbridge.steer.steering import BAN  # noqa: E402
from toolbridge.steer.thinking import ThinkingEnd  # noqa: E402
from toolbridge.thinking import DEFAULT_THINKING  # noqa: E402
from test_call_bias import ANSWERS, ENCODE, ID, PIECES, args, processor  # noqa: E402
from test_no_sync import META, Seen  # noqa: E402

OPENING = ENCODE("<|assistant|>\n<think>\n")  # a prompt that leaves the thinking open
CLOSED = ENCODE("<|assistant|>\n")  # one that does not
THOUGHT = "The user wants {x}; <tool_call> would be wrong here, let me see."  # markup the rules must not see
END = ID["~"]
WHERE = [("cpu", True), ("cpu", False)]


def thinking(budget: int | None = None) -> ThinkingEnd:
    return ThinkingEnd.for_thinking(DEFAULT_THINKING, ENCODE, budget)


def with_thinking(kind: str, budget: int | None = None, close: float = 0.0) -> dict:
    a = args(kind, close)
    packed = dict(a.get(ARG, {}))
    packed["thinking"] = thinking(budget).pack()
    return {ARG: packed}


def changes(where, extra: dict, prompt: list[int], tokens: list[int], forced: bool = False) -> list[torch.Tensor]:
    """Each step's logits change for one request writing `tokens` (with `forced`, the top token of each
    step is written instead where the processor holds the row, as a sampler would)."""
    proc = processor(where)
    out: list[int] = []
    proc.update_state(BatchUpdate(1, [], [(0, SimpleNamespace(extra_args=extra, all_stop_token_ids={END}),
                                           prompt, out)], []))
    seen, k = [], 0
    while k < len(tokens):
        proc.update_state(None)
        base = torch.randn(1, len(PIECES), generator=torch.Generator().manual_seed(len(out)))
        logits = proc.apply(base.clone().to(where[0]))
        delta = (logits.cpu() - base).nan_to_num(posinf=1e9, neginf=-1e9)
        seen.append(delta[0])
        held = delta[0].lt(-1e8).sum().item() == len(PIECES) - 1
        if forced and held:
            out.append(int(logits[0].argmax()))
        else:
            out.append(tokens[k])
            k += 1
    return seen


@pytest.mark.parametrize("where", WHERE, ids=["cpu-host", "cpu-device"])
@pytest.mark.parametrize("kind", ["auto", "steer", "guard", "required"])
@pytest.mark.parametrize("answer", ["tagged", "late", "bare", "close", "prose", "result"])
def test_the_rules_start_after_the_thinking(where, kind, answer):
    """Inside the thinking no logit moves; after `</think>` each step's change is the change the same
    answer gets with no thinking at all (the start bias on the first token after the marker)."""
    think = ENCODE(THOUGHT + "</think>")
    tokens = ENCODE(ANSWERS[answer])
    thought = changes(where, with_thinking(kind, close=5.5), OPENING, think + tokens)
    alone = changes(where, args(kind, 5.5), CLOSED, tokens)
    assert all(not d.any() for d in thought[:len(think)])
    for step, (a, b) in enumerate(zip(thought[len(think):], alone)):
        assert torch.equal(a, b), (answer, step)
    if kind in ("auto", "steer"):
        assert alone[0].any()  # the start bias spoke, at the answer's first token


@pytest.mark.parametrize("where", WHERE, ids=["cpu-host", "cpu-device"])
def test_a_prompt_that_does_not_open_thinking_is_ruled_from_its_first_token(where):
    tokens = ENCODE(ANSWERS["tagged"])
    a = changes(where, with_thinking("auto", budget=3), CLOSED, tokens)
    b = changes(where, args("auto"), CLOSED, tokens)
    assert all(torch.equal(x, y) for x, y in zip(a, b))


@pytest.mark.parametrize("where", WHERE, ids=["cpu-host", "cpu-device"])
@pytest.mark.parametrize("budget", [0, 1, 5])
def test_the_budget_writes_the_close_marker(where, budget):
    """At the budget the row is held to the marker's tokens, one a step; the answer's rules follow."""
    rambling = ENCODE("hmm " * 20)
    proc = processor(where)
    out: list[int] = []
    proc.update_state(BatchUpdate(1, [], [(0, SimpleNamespace(extra_args=with_thinking("auto", budget),
                                                              all_stop_token_ids={END}), OPENING, out)], []))
    marker = ENCODE(DEFAULT_THINKING.close)
    for step in range(budget + len(marker) + 1):
        proc.update_state(None)
        logits = proc.apply(torch.zeros(1, len(PIECES), device=where[0]))
        if budget <= step < budget + len(marker):
            assert int(logits[0].argmax()) == marker[step - budget]
            assert torch.isinf(logits[0]).sum().item() == len(PIECES) - 1
            out.append(int(logits[0].argmax()))
        elif step == budget + len(marker):  # the answer's first token: the start bias
            assert logits[0].max().item() > 0
        else:
            assert not logits[0].any()
            out.append(rambling[step])


def test_on_meta_logits_nothing_is_read_back(monkeypatch):
    """Thinking (with a budget that holds rows), then every answer under every rule, on `meta` logits."""
    seen = Seen(monkeypatch)
    requests = [(with_thinking(kind, budget, 5.5), text) for kind in ("auto", "required", "guard")
                for budget in (None, 4) for text in ANSWERS.values()]
    proc = processor(("cpu", False))
    proc._device = META
    outs = [[] for _ in requests]
    proc.update_state(BatchUpdate(len(requests), [], [(i, SimpleNamespace(extra_args=a, all_stop_token_ids={END}),
                                                       OPENING, outs[i]) for i, (a, _) in enumerate(requests)], []))
    tokens = [ENCODE(THOUGHT + "</think>" + text) for _, text in requests]
    for step in range(max(map(len, tokens))):
        proc.update_state(None)
        seen.look(proc)
        logits = torch.empty(len(requests), len(PIECES), device=META)
        assert proc.apply(logits) is logits
        for out, toks in zip(outs, tokens):
            out.append(toks[step] if step < len(toks) else ENCODE(".")[0])
    assert seen.holds and seen.deciding  # the budget's holds and the argument close both spoke


@settings(max_examples=300, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4)))
def test_a_malformed_thinking_argument_reads_as_none(junk):
    assert thinking_from_args({ARG: {"thinking": junk}}) is None or isinstance(junk, dict)
    thinking_from_args({ARG: junk})
    thinking_from_args(junk)


def test_the_thinking_end_round_trips():
    t = thinking(7)
    back = thinking_from_args(to_args(None, None, t))
    assert (back.close, back.tokens, back.budget) == (t.close, t.tokens, 7)


@pytest.mark.parametrize("where", WHERE, ids=["cpu-host", "cpu-device"])
def test_a_forced_call_does_not_end_inside_the_thinking(where):
    """required and named: the end tokens are banned while the model thinks (it thinks on to the
    marker or the budget), and free again in the answer."""
    a = with_thinking("required")
    a[ARG]["thinking"] = {**a[ARG]["thinking"], "forced": True}
    proc = processor(where)
    out: list[int] = []
    proc.update_state(BatchUpdate(1, [], [(0, SimpleNamespace(extra_args=a, all_stop_token_ids={END}), OPENING, out)],
                                  []))
    tokens = ENCODE("hmm</think>" + ANSWERS["bare"])
    think = len(ENCODE("hmm</think>"))
    for step, token in enumerate(tokens):
        proc.update_state(None)
        logits = proc.apply(torch.zeros(1, len(PIECES), device=where[0]))
        assert (logits[0, END].item() <= BAN) == (step < think), step
        out.append(token)
