"""vLLM's batch logits processor (vllm_plugin.processor.RulesProcessor) against the per-request rule it replaced:
the same logits changes on the same answers, through vLLM's own interface (BatchUpdate: rows added,
removed, moved, swapped), with a small tokenizer of its own (no model needed). On every device there
is (the CPU, and CUDA where present), and on the CPU both ways of deciding the argument close: reading
the top token on the host, and on the device as a GPU does (tests/test_no_sync.py: nothing read back)."""
from __future__ import annotations

import math
import random
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servers import require

require("vllm")
import torch  # noqa: E402
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor, MoveDirectionality  # noqa: E402

from toolbridge.dialects import get_dialect  # noqa: E402
from toolbridge.constrain.grammar import call_starts  # noqa: E402
from toolbridge.steer import callguard  # noqa: E402
from toolbridge.steer.args import ARG, from_args, to_args  # noqa: E402
from toolbridge.steer.callguard import POINTS, CallGuard, closers, enders  # noqa: E402
from toolbridge.steer.logits import write  # noqa: E402
from toolbridge.steer.vocab import hf_vocabulary  # noqa: E402
from toolbridge.steer.steering import BAN, Steering  # noqa: E402
from vllm_plugin.processor import RulesProcessor  # noqa: E402
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


class Bias(RulesProcessor):
    def _load_tokenizer(self):
        return TOK


# Where the processor runs: (device, top_on_host). On the CPU both ways of deciding the argument close.
WHERE = [("cpu", True), ("cpu", False)] + ([("cuda", None)] if torch.cuda.is_available() else [])
WHERE_IDS = ["cpu-host", "cpu-device", "cuda"][:len(WHERE)]
where = pytest.mark.parametrize("where", WHERE, ids=WHERE_IDS)


def processor(where=("cpu", None)):
    device, on_host = where
    p = Bias(SimpleNamespace(model_config=None), torch.device(device), device != "cpu")
    p.top_on_host = on_host
    return p


def zeros(where, rows):
    return torch.zeros(rows, len(PIECES), device=where[0])


class Reference:
    """vllm_plugin/processor.py's per-request rule before the batch processor, one row at a time."""

    def __init__(self, args):
        self.steering, self.guard = from_args(args)
        self.read = 0
        self.closers, self.enders = closers(ENCODE), enders(ENCODE, lambda t: TOK.decode([t]))

    def apply(self, output_ids, logits):
        self.read = reference_step(self.steering, self.guard, output_ids, logits, self.read, TOK.decode,
                                   self.closers, self.enders)
        return logits


def steering(bias=5.0):
    return Steering.for_dialect(get_dialect("tags"), ENCODE, TOOLS, start_bias=bias)


def args(kind, close=0.0):
    lazy = CallGuard(call_starts(get_dialect("tags")), REQUIRED, close)
    return {"auto": to_args(steering(), lazy), "required": to_args(None, CallGuard([], REQUIRED, close)),
            "steer": to_args(steering(), None), "guard": to_args(None, lazy), "plain": {}}[kind]


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

    def __init__(self, requests, seed, width=4, where=("cpu", None)):
        self.rng = random.Random(seed)
        self.queue = list(requests)  # (args, answer tokens)
        self.rows: list = []  # [args, tokens, output ids, reference] or None
        self.width = width
        self.device = where[0]
        self.proc = processor(where)

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
            logits = logits_for(self.rng, len(PIECES), nexts).to(self.device)
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
    assert issubclass(RulesProcessor, LogitsProcessor) and not RulesProcessor(None, "cpu", False).is_argmax_invariant()


@where
@pytest.mark.parametrize("kind", ["auto", "required", "steer", "guard"])
@pytest.mark.parametrize("close", [0.0, 5.5])
def test_each_answer_alone_gets_the_rules_changes(kind, close, where):
    for name, text in ANSWERS.items():
        Engine([(args(kind, close), ENCODE(text))], seed=hash(name) % 1000, width=1, where=where).run()


@where
@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["auto", "required", "steer", "guard", "plain"]),
                          st.sampled_from([0.0, 5.5, 3.0]), st.sampled_from(sorted(ANSWERS))), min_size=1, max_size=12),
       st.integers(0, 10**6), st.integers(1, 6))
def test_a_batch_that_comes_and_goes_gets_each_answers_own_changes(where, requests, seed, width):
    Engine([(args(kind, close), ENCODE(ANSWERS[name])) for kind, close, name in requests], seed, width, where).run()


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


@where
def test_a_steered_answer_start_and_a_name_hold(where):
    p, out = processor(where), []
    p.update_state(BatchUpdate(1, [], [(0, SimpleNamespace(extra_args=args("auto")), None, out)], []))
    logits = zeros(where, 1)
    p.apply(logits)
    assert {t for t in range(len(PIECES)) if logits[0, t] == 5.0} == set(steering().starts)
    out += ENCODE('{"name": "get_')
    logits = zeros(where, 1)
    p.apply(logits)
    assert [t for t in range(len(PIECES)) if logits[0, t] > -math.inf] == sorted([ID["t"], ID["weather"]])
    logits = zeros(where, 1)
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
    assert set(p._ruled) == {0, 2} and p._answers[0].rules.guard.armed


class Counting(Bias):
    tops: list = []

    def _top(self, logits, rows):
        self.tops.append(list(rows))
        return super()._top(logits, rows)


@where
def test_the_top_token_is_read_once_a_step_for_the_rows_that_decide(where):
    p = Counting(None, torch.device(where[0]), False)
    p.top_on_host, Counting.tops = where[1], []
    call = '{"name": "search", "arguments": {"query": "'
    outs = [ENCODE(call + "x"), ENCODE('{"name": "search", "arguments": {"q'), [], ENCODE(call + "y")]
    p.update_state(BatchUpdate(4, [], [(i, SimpleNamespace(extra_args=args("required", 5.5)), None, out)
                                       for i, out in enumerate(outs)], []))
    logits = zeros(where, 4)
    logits[0, QUOTE_COMMA] = logits[1, QUOTE_COMMA] = 1.0  # rows 0 and 1 would go on to another argument
    logits[3, ID["x"]] = 1.0  # row 3 goes on with its value
    p.apply(logits)
    assert p.tops == ([[0, 3]] if where[1] else [])  # row 1 is in a key, row 2 has written nothing
    assert logits[0].max() == 5.5 and logits[1].max() == logits[3].max() == 1.0 and logits[2].max() == 0
    assert {t for t in range(len(PIECES)) if logits[0, t] == 5.5} == {ID['"}}'], ID['"}']}


FORGED = [
    {ARG: {"steering": {"start_bias": 1, "call": ["x"]}}},
    {ARG: {"steering": {"start_bias": "much", "call": [1]}}},
    {ARG: {"steering": {"start_bias": 1, "call": [1], "names": 7}}},
    {ARG: {"steering": {"start_bias": 1, "call": [1], "next_bias": 2**2000}}},
    {ARG: {"guard": {"starts": 3}}},
    {ARG: {"guard": {"starts": [], "close": ["y", "z"]}}},
    {ARG: {"guard": {"starts": [], "close": [1, [2]]}}},
    {ARG: ["x", 3]},
    {ARG: {"steering": 7, "guard": "x"}},
    {ARG: {"steering": {"start_bias": 1, "call": [10**9, -3], "starts": [10**9, -1, 2**70], "result": [-5],
                        "names": [[[-1]], [[-1, 10**9]]]}}},
    {ARG: {"steering": {"start_bias": 2, "call": [1], "names": [[[5]], [[5, 10**9], [5, -2]]]}}},
]


@where
@pytest.mark.parametrize("forged", FORGED)
def test_malformed_rule_arguments_are_ignored_and_never_raise(forged, where):
    p = processor(where)
    outs = [[], [], []]
    p.update_state(BatchUpdate(3, [], [(0, SimpleNamespace(extra_args=forged), None, outs[0]),
                                       (1, SimpleNamespace(extra_args=args("auto")), None, outs[1]),
                                       (2, SimpleNamespace(extra_args=None), None, outs[2])], []))
    for token in [5, -1, 7, ID['{"']]:  # -1: a placeholder vLLM has not filled in yet
        logits = zeros(where, 3)
        p.apply(logits)
        assert logits[2].eq(0).all() and logits[0].isfinite().any()
        for out in outs:
            out.append(token)
    p.apply(zeros(where, 3))


def test_right_after_the_first_call_another_call_start_is_favoured():
    """tb_next_bias through the batch processor: the starts' first tokens right after the answer's
    first call (and its closing markup), nothing after its second."""
    p, out = processor(), []
    lazy = CallGuard(call_starts(get_dialect("tags")), REQUIRED)
    a = to_args(Steering.for_dialect(get_dialect("tags"), ENCODE, TOOLS, start_bias=5.0, next_bias=7.0), lazy)
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
    s = Steering.for_dialect(get_dialect("tags"), ENCODE, TOOLS, start_bias=5.0, next_bias=7.0)
    p.update_state(BatchUpdate(1, [], [(0, SimpleNamespace(extra_args=to_args(s, lazy)), None, out)], []))

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


def test_the_close_tables_hold_what_the_guard_decides():
    """Where a guard decides on the top token (CallGuard.decides_at), the vocabulary's tables say what
    its `changes` do, for every token: whether it goes on to another argument (going_on), and which
    enders then get the close bias (ending_at); at every step of every answer, every point met."""
    vocab = hf_vocabulary(Tokenizer())
    assert all(callguard._guard_at(p).decides_at == p for p in POINTS)  # the tables' own calls stand there
    met = set()
    nested = '{"name": "search", "arguments": {"query": "a\\\\b\\"c", "n": 1.5, "x": [1, {"y": 2}]}}'
    texts = [*ANSWERS.values(), nested]
    for text in texts:
        g = CallGuard([], REQUIRED, 5.5)
        for token in ENCODE(text):
            at = g.decides_at
            assert (at is not None) == g.wants_top
            if at is not None:
                met.add(at)
                going = set(vocab.going_on[at])
                for t, piece in enumerate(PIECES):
                    close = g.changes(lambda: piece, vocab.closers, vocab.enders)
                    assert (t in going) == bool(close), (text, at, piece)
                    assert close == [(e, 5.5) for e in vocab.ending_at[at]] or not close
            g.feed(PIECES[token])
    assert met == set(POINTS)


@pytest.mark.parametrize("top", ['",', ",", "x", '"}}'])
def test_a_change_on_a_closing_token_adds_up_as_on_the_host(top):
    """A token that gets another change at the step the argument close decides on (here a ban after a
    repeated call, forged onto the enders) gets both in one add on the device, as on the host."""
    ban = [ID['"}}'], ID['"}'], ID["}}"]]
    forged = {ARG: {"guard": CallGuard([], REQUIRED, 5.5).pack(),
                    "steering": {"start_bias": 0, "next_bias": 1.0, "call": [ID["<tool_call>"]], "opens": ban}}}
    call = '{"name": "get_time", "arguments": {}}'
    got = []
    for on_host in (True, False):
        p, out = processor(("cpu", on_host)), []
        p.update_state(BatchUpdate(2, [], [(1, SimpleNamespace(extra_args=forged), None, out)], []))
        out += ENCODE(call + call + '{"name": "search", "arguments": {"query": "cats')
        base = torch.randn(2, len(PIECES), generator=torch.Generator().manual_seed(7))
        base[1, ID[top]] = 20.0
        logits = base.clone()
        p.apply(logits)
        assert p._ruled[1].rules.guard.repeated and p._ruled[1].rules.guard.decides_at
        got.append(logits)
    assert torch.equal(got[0], got[1])
    closed = 5.5 if top == '",' else 0.0  # in a string a comma is the string's
    assert torch.equal(got[0][1, ID['"}}']], base[1, ID['"}}']] + (BAN + closed))


def old_write(logits, edits, array):
    """toolbridge.steer.logits.write's holds before they went without a read back (git history)."""
    vocab = logits.shape[-1]
    added, held_rows, held = {}, [], []
    for row, changes, only in edits:
        for token, change in changes:
            if 0 <= token < vocab:
                added[row, token] = added.get((row, token), 0.0) + change
        if only is not None:
            kept = [t for t in only if 0 <= t < vocab]
            if kept:
                held_rows.append(row)
                held.append(kept)
    if added:
        rows, tokens = array([r for r, _ in added]), array([t for _, t in added])
        logits[rows, tokens] += array(list(added.values()), logits.dtype)
    if held_rows:
        at = array(held_rows)
        sub = logits[at]
        keep = sub < -math.inf
        keep[array([i for i, kept in enumerate(held) for _ in kept]), array([t for kept in held for t in kept])] = True
        sub[~keep] = -math.inf
        open_ = (sub > -math.inf).any(-1)
        logits[at[open_]] = sub[open_]


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10**6))
def test_the_writer_does_as_before_on_numpy_and_torch(seed):
    """toolbridge.steer.logits.write (numpy for llama.cpp, torch for vLLM): the same logits as its former
    holds, which read a mask back; rows held to tokens all -inf, or some, or none, with changes too."""
    rng = random.Random(seed)
    rows, vocab = rng.randint(1, 5), rng.randint(1, 12)
    base = np.random.default_rng(seed).normal(size=(rows, vocab)).astype(np.float32)
    base[np.random.default_rng(seed + 1).random((rows, vocab)) < 0.3] = -np.inf
    edits = []
    for row in rng.sample(range(rows), rng.randint(0, rows)):
        changes = [(rng.randint(-1, vocab), rng.choice([5.0, -1e4, 0.5])) for _ in range(rng.randint(0, 3))]
        only = None if rng.random() < 0.3 else tuple(rng.randint(-1, vocab) for _ in range(rng.randint(0, 3)))
        edits.append((row, changes, only))
    expected = base.copy()
    old_write(expected, edits, np.asarray)
    for array_of, to in ((np.asarray, lambda a: a), (lambda v, d=None: torch.tensor(v, dtype=d), torch.from_numpy)):
        logits = to(base.copy())
        write(logits, edits, array_of)
        assert np.array_equal(np.asarray(logits), expected), edits



def test_an_answer_ends_after_its_calls():
    """After a complete call the processor holds a row to what leads to another call or to the end
    where the model's top token is one of those, and to the end alone where it would write text."""
    from toolbridge.steer.ending import Follow

    follow = Follow(("</tool_call>",), ("<tool_call>", '{"name": "search"'))
    guarded = to_args(steering(), CallGuard(call_starts(get_dialect("tags")), REQUIRED, 0.0, follow))
    end = ID["~"]
    proc = Bias(SimpleNamespace(model_config=None), torch.device("cpu"), False)
    outs = [ENCODE(ANSWERS["tagged"]) for _ in range(3)]
    proc.update_state(BatchUpdate(3, [], [(i, SimpleNamespace(extra_args=guarded, all_stop_token_ids={end}), [1], outs[i])
                                          for i in range(3)], []))
    logits = torch.zeros(3, len(PIECES))
    logits[0, ID[" the"]] = 5.0  # would go on with text: only the end
    logits[1, ID["\n"]] = 5.0  # a newline: another call may follow it
    logits[2, ID["<tool_call>"]] = 5.0  # another call
    proc.apply(logits)
    finite = [set(torch.isfinite(row).nonzero().flatten().tolist()) for row in logits]
    assert finite[0] == {end}
    assert {end, ID["\n"], ID["<tool_call>"], ID["<tool_"]} <= finite[1] and ID[" the"] not in finite[1]
    assert finite[2] == finite[1]


@where
@pytest.mark.parametrize("kind", ["auto", "steer"])
def test_a_start_the_bias_favoured_goes_on_with_a_call_start_or_ends(where, kind):
    """vLLM cannot take a token back: after the biased `<` (the first piece of `<tool_call>` here), where
    the model's top token goes on with a call start the answer is held to the tokens that do; where it
    would write anything else, it ends there (the request check then asks again without the bias,
    toolbridge.serving.again). Once the start stands, or was never taken, nothing is held."""
    end = ID["~"]
    going = set(hf_vocabulary(TOK).start_going(steering().texts, "<"))
    assert ID["t"] in going and ID["<tool_call>"] not in going and ID["p"] not in going
    for top, held in ((ID["t"], going | {end}), (ID["p"], {end})):
        p, out = processor(where), []
        params = SimpleNamespace(extra_args=args(kind), all_stop_token_ids=[end])
        p.update_state(BatchUpdate(1, [], [(0, params, None, out)], []))
        p.apply(zeros(where, 1))  # the start: the bias on every call start's first token
        out.append(ID["<"])
        logits = zeros(where, 1)
        logits[0, top] = 3.0
        p.apply(logits)
        assert {t for t in range(len(PIECES)) if logits[0, t] > -math.inf} == held
        out.append(top)  # `<t` is still a start (held again, here to its end: the top, 0, is none);
        logits = zeros(where, 1)  # `<p` has left every start (nothing held: the request check's part)
        p.apply(logits)
        assert bool(logits[0].isfinite().all()) == (top == ID["p"])
    p, out = processor(where), []  # the model's own text at the start: nothing held
    p.update_state(BatchUpdate(1, [], [(0, SimpleNamespace(extra_args=args(kind), all_stop_token_ids=[end]), None,
                                         out)], []))
    p.apply(zeros(where, 1))
    out.append(ID["S"])
    logits = zeros(where, 1)
    p.apply(logits)
    assert bool(logits[0].isfinite().all())


@pytest.mark.parametrize("dialect", ["tags", "json", "toolcall", "fenced", "react"])
def test_in_every_dialect_a_favoured_start_left_for_other_text_ends_the_answer(dialect):
    """The same hold for every dialect's call start and the bare JSON call, one character a token here:
    after the start's first character, the start's next one keeps the answer going with it; any other top
    token ends it."""
    end = ID["~"]
    s = Steering.for_dialect(get_dialect(dialect), ENCODE, TOOLS, start_bias=5.0)
    for start in call_starts(get_dialect(dialect)):
        first, going, other = ENCODE(start[0]), ENCODE(start[1])[0], ID["Q"]
        for top, ends in ((going, False), (other, True)):
            p, out = processor(), []
            params = SimpleNamespace(extra_args=to_args(s, None), all_stop_token_ids=[end])
            p.update_state(BatchUpdate(1, [], [(0, params, None, out)], []))
            p.apply(zeros(("cpu", None), 1))
            out += first
            logits = zeros(("cpu", None), 1)
            logits[0, top] = 3.0
            p.apply(logits)
            finite = {t for t in range(len(PIECES)) if logits[0, t] > -math.inf}
            assert finite == {end} if ends else (top in finite and end in finite and len(finite) < len(PIECES))
