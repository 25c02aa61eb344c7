"""vLLM's batch logits processor (vllm_plugin.bias.CallBias) against the per-request rule it replaced:
the same logits changes on the same answers, through vLLM's own interface (BatchUpdate: rows added,
removed, moved, swapped), with a small tokenizer of its own (no model needed)."""
from __future__ import annotations

import math
import random
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servers import require

require("vllm")
import torch  # noqa: E402
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor, MoveDirectionality  # noqa: E402

from toolbridge.dialects import get_dialect  # noqa: E402
from toolbridge.grammar import call_starts  # noqa: E402
from toolbridge.callguard import CallGuard, closers, enders  # noqa: E402
from toolbridge.steer import BAN, Steering  # noqa: E402
from vllm_plugin.bias import CallBias  # noqa: E402
from bench.logits_cost import reference_step  # noqa: E402  (the old processor's rule, kept there verbatim)

# A vocabulary of single characters and the merged pieces a real one has (`{"`, `",`, `<tool_`...).
PIECES = [chr(c) for c in range(32, 127)] + ["\n", "<tool_call>", "<tool_", "call>", "response>", '{"', ' {"', "name",
                                              '":', ' "', '",', '"}}', '"}', "}}", "get_", "weather", "search", "query",
                                              "arguments", "_2023", "lasagna", " the", " is", "\u00e9t\u00e9"]
ID = {p: i for i, p in enumerate(PIECES)}
TOOLS = ["get_weather", "get_time", "search"]
REQUIRED = {"get_weather": ["city"], "get_time": [], "search": ["query"]}


class Tokenizer:
    def __init__(self):
        self.decoded = 0  # decode calls after the processor's table of token texts is built

    def __len__(self):
        return len(PIECES)

    def encode(self, text, add_special_tokens=False):
        out, i = [], 0
        while i < len(text):
            piece = max((p for p in PIECES if text.startswith(p, i)), key=len)
            out.append(ID[piece])
            i += len(piece)
        return out

    def decode(self, ids):
        self.decoded += 1
        return "".join(PIECES[i] for i in ids)


TOK = Tokenizer()
ENCODE = TOK.encode
COMMA, QUOTE_COMMA = ID[","], ID['",']


class Bias(CallBias):
    def _load_tokenizer(self):
        return TOK


def processor():
    return Bias(SimpleNamespace(model_config=None), torch.device("cpu"), False)


class Reference:
    """vllm_plugin/bias.py's per-request rule before the batch processor, one row at a time."""

    def __init__(self, args):
        self.steering, self.guard = Steering.from_args(args), CallGuard.from_args(args)
        self.read = 0
        self.closers, self.enders = closers(ENCODE), enders(ENCODE, lambda t: TOK.decode([t]))

    def apply(self, output_ids, logits):
        self.read = reference_step(self.steering, self.guard, output_ids, logits, self.read, TOK.decode,
                                   self.closers, self.enders)
        return logits


def steering(bias=5.0):
    return Steering.for_dialect(get_dialect("tags"), bias, ENCODE, TOOLS)


def args(kind, close=0.0):
    lazy = CallGuard(call_starts(get_dialect("tags")), REQUIRED, close)
    return {"auto": {**steering().to_args(), **lazy.to_args()}, "required": CallGuard([], REQUIRED, close).to_args(),
            "steer": steering().to_args(), "guard": lazy.to_args(), "plain": {}}[kind]


ANSWERS = {
    "prose": "Sure, the weather is nice: no rain today, \u00e9t\u00e9 is warm.",
    "marked prose": 'Use {x} and <b>tags</b>, "quoted", then {"a": 1} and <tool_ here.',
    "tagged": '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
    "late": 'I will check. <tool_call>\n{"name": "search", "arguments": {"query": "cats", "max": 3}}\n</tool_call>',
    "bare": '{"name": "get_time", "arguments": {}}',
    "spaced bare": ' {"name": "search", "arguments": {"query": "lasagna"}}',
    "wrong name": '{"name": "get_weather_now", "arguments": {}}',
    "loop": '<tool_call>\n{"name": "search", "arguments": {"query": "NVDA' + "_2023" * 14 + '"}}',
    "escaped": '{"name": "search", "arguments": {"query": "a \\"b\\" ' + "xy" * 30 + '"}}',
    "close": '{"name": "search", "arguments": {"query": "lasagna", "max_results": 10, "x": "y"}}',
    "result": "<tool_response>\n42",
}


def logits_for(rng, vocab, nexts):
    """Random logits whose top is, by turns, the answer's next token or one that goes on to
    another argument (where the argument close decides)."""
    out = torch.randn(len(nexts), vocab, generator=torch.Generator().manual_seed(rng.randrange(2**31)))
    for row, nxt in enumerate(nexts):
        pick = rng.random()
        token = nxt if pick < 0.5 or nxt is None else (QUOTE_COMMA if pick < 0.75 else COMMA)
        if token is not None:
            out[row, token] += 6.0
        if rng.random() < 0.1:
            out[row, rng.randrange(vocab)] = -math.inf  # something else (a grammar) forbids a token
    return out


class Engine:
    """vLLM's persistent batch as logits processors see it: requests come and go, a new one takes
    the lowest free row, the batch is condensed by moving the last rows into the holes, and rows
    are sometimes swapped."""

    def __init__(self, requests, seed, width=4):
        self.rng = random.Random(seed)
        self.queue = list(requests)  # (args, answer tokens)
        self.rows: list = []  # [args, tokens, output ids, reference] or None
        self.width = width
        self.proc = processor()

    def update(self):
        removed = []
        for i, r in enumerate(self.rows):
            if r is not None and (len(r[2]) >= len(r[1]) or self.rng.random() < 0.03):
                self.rows[i] = None
                removed.append(i)
        added = []
        while self.queue and sum(r is not None for r in self.rows) < self.width:
            a, tokens = self.queue.pop(0)
            r = [a, tokens, [], Reference(a)]
            free = [i for i, x in enumerate(self.rows) if x is None]
            i = free[0] if free else len(self.rows)
            if free:
                self.rows[i] = r
                if i in removed:  # vLLM fills a freed row: it is no longer reported removed
                    removed.remove(i)
            else:
                self.rows.append(r)
            added.append((i, SimpleNamespace(extra_args=a), [1, 2], r[2]))
        moved = []
        while self.rows and self.rows[-1] is None:
            self.rows.pop()
        holes = [i for i, x in enumerate(self.rows) if x is None]
        for hole in holes:
            while self.rows and self.rows[-1] is None:
                self.rows.pop()
            if hole >= len(self.rows):
                break
            last = len(self.rows) - 1
            self.rows[hole], self.rows[last] = self.rows[last], None
            moved.append((last, hole, MoveDirectionality.UNIDIRECTIONAL))
            self.rows.pop()
        if len(self.rows) > 1 and self.rng.random() < 0.3:
            i, j = self.rng.sample(range(len(self.rows)), 2)
            self.rows[i], self.rows[j] = self.rows[j], self.rows[i]
            moved.append((i, j, MoveDirectionality.SWAP))
        if removed or added or moved:
            self.proc.update_state(BatchUpdate(len(self.rows), removed, added, moved))
        else:
            self.proc.update_state(None)

    def run(self):
        steps = 0
        while self.queue or any(self.rows):
            self.update()
            if not self.rows:
                continue
            nexts = [r[1][len(r[2])] if len(r[2]) < len(r[1]) else None for r in self.rows]
            logits = logits_for(self.rng, len(PIECES), nexts)
            expected = logits.clone()
            got = self.proc.apply(logits)
            assert got is logits
            for i, r in enumerate(self.rows):
                r[3].apply(r[2], expected[i])
            assert torch.equal(got, expected), [i for i in range(len(self.rows)) if not torch.equal(got[i], expected[i])]
            for r in self.rows:
                r[2].append(r[1][len(r[2])] if len(r[2]) < len(r[1]) else ID["."])
            steps += 1
        return steps


def test_it_is_a_batch_processor_registered_under_its_name():
    assert issubclass(CallBias, LogitsProcessor) and not CallBias(None, "cpu", False).is_argmax_invariant()


@pytest.mark.parametrize("kind", ["auto", "required", "steer", "guard"])
@pytest.mark.parametrize("close", [0.0, 5.5])
def test_each_answer_alone_gets_the_rules_changes(kind, close):
    for name, text in ANSWERS.items():
        Engine([(args(kind, close), ENCODE(text))], seed=hash(name) % 1000, width=1).run()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["auto", "required", "steer", "guard", "plain"]),
                          st.sampled_from([0.0, 5.5]), st.sampled_from(sorted(ANSWERS))), min_size=1, max_size=12),
       st.integers(0, 10**6), st.integers(1, 6))
def test_a_batch_that_comes_and_goes_gets_each_answers_own_changes(requests, seed, width):
    Engine([(args(kind, close), ENCODE(ANSWERS[name])) for kind, close, name in requests], seed, width).run()


def test_the_rules_are_seen_to_act():
    """The sequences above do exercise each rule (so the comparisons mean something)."""
    s, ids = steering(), ENCODE('{"name": "get_')
    assert s.changes([]) and s.only(ids) == tuple(sorted([ID["t"], ID["weather"]]))
    g = CallGuard([], REQUIRED, 5.5)
    g.feed('{"name": "search", "arguments": {"query": "lasagna')
    assert g.wants_top and g.changes(lambda: '",', (), enders(ENCODE, lambda t: PIECES[t]))
    g = CallGuard([])
    g.feed('{"q": "NVDA' + "_2023" * 12)
    assert g.looping


def test_a_steered_answer_start_and_a_name_hold():
    p, out = processor(), []
    p.update_state(BatchUpdate(1, [], [(0, SimpleNamespace(extra_args=args("auto")), None, out)], []))
    logits = torch.zeros(1, len(PIECES))
    p.apply(logits)
    assert {t for t in range(len(PIECES)) if logits[0, t] == 5.0} == set(steering().starts)
    out += ENCODE('{"name": "get_')
    logits = torch.zeros(1, len(PIECES))
    p.apply(logits)
    assert [t for t in range(len(PIECES)) if logits[0, t] > -math.inf] == sorted([ID["t"], ID["weather"]])
    logits = torch.zeros(1, len(PIECES))
    logits[0, [ID["t"], ID["weather"]]] = -math.inf  # something else forbids them all: the hold gives way
    p.apply(logits)
    assert int(logits[0].isfinite().sum()) == len(PIECES) - 2


def test_only_what_may_start_a_call_is_decoded_and_rows_past_the_rules_are_dropped():
    p = processor()
    outs = [[] for _ in range(3)]
    added = [(0, SimpleNamespace(extra_args=args("auto")), None, outs[0]),
             (1, SimpleNamespace(extra_args=args("steer")), None, outs[1]),
             (2, SimpleNamespace(extra_args=args("required")), None, outs[2])]
    p.update_state(BatchUpdate(3, [], added, []))
    TOK.decoded = 0
    prose, call = ENCODE(ANSWERS["prose"]), ENCODE(ANSWERS["tagged"])
    for k in range(len(prose)):
        for i, out in enumerate(outs):
            p.apply(torch.zeros(3, len(PIECES)))
            out.append((call if i == 2 else prose)[min(k, len(call) - 1) if i == 2 else k])
    assert TOK.decoded == 0  # prose tokens were looked at by id; the call's text came from the table
    assert set(p._answers) == {0, 2} and set(p._watch) == {0} and set(p._ruled) == {2}
    outs[0] += ENCODE(" <tool_call>")
    p.apply(torch.zeros(3, len(PIECES)))
    assert set(p._ruled) == {0, 2} and p._answers[0].guard.armed


class Counting(Bias):
    tops: list = []

    def _top(self, logits, rows):
        self.tops.append(list(rows))
        return super()._top(logits, rows)


def test_the_top_token_is_read_once_a_step_for_the_rows_that_decide():
    p = Counting(None, torch.device("cpu"), False)
    call = '{"name": "search", "arguments": {"query": "'
    outs = [ENCODE(call + "x"), ENCODE('{"name": "search", "arguments": {"q'), [], ENCODE(call + "y")]
    p.update_state(BatchUpdate(4, [], [(i, SimpleNamespace(extra_args=args("required", 5.5)), None, out)
                                       for i, out in enumerate(outs)], []))
    logits = torch.zeros(4, len(PIECES))
    logits[0, QUOTE_COMMA] = logits[1, QUOTE_COMMA] = 1.0  # rows 0 and 1 would go on to another argument
    logits[3, ID["x"]] = 1.0  # row 3 goes on with its value
    p.apply(logits)
    assert p.tops == [[0, 3]]  # row 1 is in a key, row 2 has written nothing
    assert logits[0].max() == 5.5 and logits[1].max() == logits[3].max() == 1.0 and logits[2].max() == 0


FORGED = [
    {"toolbridge_bias": 1, "toolbridge_bias_ids": ["x"]},
    {"toolbridge_bias": "much", "toolbridge_bias_ids": [1]},
    {"toolbridge_bias": 1, "toolbridge_bias_ids": [1], "toolbridge_name_ids": 7},
    {"toolbridge_call_guard": 3},
    {"toolbridge_call_guard": [], "toolbridge_close": ["y", "z"]},
    {"toolbridge_call_guard": [], "toolbridge_close": [1, [2]]},
    {"toolbridge_bias": 1, "toolbridge_bias_ids": [10**9, -3], "toolbridge_start_ids": [10**9, -1, 2**70],
     "toolbridge_result_ids": [-5], "toolbridge_name_ids": [[[-1]], [[-1, 10**9]]]},
    {"toolbridge_bias": 2, "toolbridge_bias_ids": [1], "toolbridge_name_ids": [[[5]], [[5, 10**9], [5, -2]]]},
]


@pytest.mark.parametrize("forged", FORGED)
def test_malformed_rule_arguments_are_ignored_and_never_raise(forged):
    p = processor()
    outs = [[], [], []]
    p.update_state(BatchUpdate(3, [], [(0, SimpleNamespace(extra_args=forged), None, outs[0]),
                                       (1, SimpleNamespace(extra_args=args("auto")), None, outs[1]),
                                       (2, SimpleNamespace(extra_args=None), None, outs[2])], []))
    for token in [5, -1, 7, ID['{"']]:  # -1: a placeholder vLLM has not filled in yet
        logits = torch.zeros(3, len(PIECES))
        p.apply(logits)
        assert logits[2].eq(0).all() and logits[0].isfinite().any()
        for out in outs:
            out.append(token)
    p.apply(torch.zeros(3, len(PIECES)))


def test_right_after_the_first_call_another_call_start_is_favoured():
    """tb_next_bias through the batch processor: the starts' first tokens right after the answer's
    first call (and its closing markup), nothing after its second."""
    p, out = processor(), []
    lazy = CallGuard(call_starts(get_dialect("tags")), REQUIRED)
    a = {**Steering.for_dialect(get_dialect("tags"), 5.0, ENCODE, TOOLS, next_bias=7.0).to_args(), **lazy.to_args()}
    p.update_state(BatchUpdate(1, [], [(0, SimpleNamespace(extra_args=a), None, out)], []))

    def favoured():
        logits = torch.zeros(1, len(PIECES))
        p.apply(logits)
        return {t for t in range(len(PIECES)) if logits[0, t] == 7.0}

    p.apply(torch.zeros(1, len(PIECES)))  # the answer's start: the start bias, 5
    out += ENCODE('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}')
    assert favoured() == set(steering().starts)
    out += ENCODE("\n</tool_call>\n")
    assert favoured() == set(steering().starts)
    out += ENCODE("Done")
    assert favoured() == set()
    out += ENCODE('{"name": "get_time", "arguments": {}}')
    assert favoured() == set()  # after the second call the model decides alone


def test_after_a_repeated_call_nothing_may_open_another():
    """A call the answer already holds, written again: from there on every call start and every
    token that opens an object or a code fence is banned in the batch processor."""
    p, out = processor(), []
    lazy = CallGuard(call_starts(get_dialect("tags")), REQUIRED)
    s = Steering.for_dialect(get_dialect("tags"), 5.0, ENCODE, TOOLS, next_bias=7.0)
    p.update_state(BatchUpdate(1, [], [(0, SimpleNamespace(extra_args={**s.to_args(), **lazy.to_args()}), None, out)], []))

    def banned():
        logits = torch.zeros(1, len(PIECES))
        p.apply(logits)
        return {t for t in range(len(PIECES)) if logits[0, t] == BAN}

    p.apply(torch.zeros(1, len(PIECES)))
    call = '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>\n'
    out += ENCODE(call)
    assert banned() == set()
    out += ENCODE(call)
    assert banned() == {*s.starts, *s.opens} and {ID["{"], ID["`"], ID['{"']} <= banned()
    out += ENCODE("(")
    assert banned() == {*s.starts, *s.opens}  # not only right after the call
