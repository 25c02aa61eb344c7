"""vLLM's batch logits processor (vllm_plugin.processor.RulesProcessor) never reads the logits back to the host.

On a GPU any read back (`.tolist()`, `.item()`, `bool()`, a boolean-mask index, `nonzero`) waits for
every piece of work queued ahead of it: the engine loses the overlap of its CPU work with the forward
pass, for the whole batch. PyTorch's `meta` device holds shapes without data, so each of those raises
there: the processor is driven here with `meta` logits through vLLM's interface (rows added, removed,
moved), for every rule, without a GPU. The values are checked on real logits in tests/test_call_bias.py.
"""
from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from servers import require

require("vllm")
import torch  # noqa: E402
from vllm.v1.sample.logits_processor import BatchUpdate  # noqa: E402

import vllm_plugin.processor as processor  # noqa: E402
from toolbridge.steer.callguard import CallGuard  # noqa: E402
from toolbridge.dialects import get_dialect  # noqa: E402
from toolbridge.steer.ending import Follow  # noqa: E402
from toolbridge.constrain.grammar import call_starts  # noqa: E402
from toolbridge.steer.args import ARG, to_args  # noqa: E402
from test_call_bias import ANSWERS, ENCODE, PIECES, REQUIRED, Bias, Engine, args, steering  # noqa: E402

META = torch.device("meta")
VOCAB = len(PIECES)
END = ENCODE("~")[0]  # the end token the requests below are given


def named(close: float = 5.5) -> dict:
    """A named tool_choice's arguments: the whole answer is one call to that tool."""
    return to_args(None, CallGuard([], {"search": REQUIRED["search"]}, close))


class Seen:
    """What the rules did over a run, so that a pass means they spoke: steps where a guard decided on
    the top token, and held rows written."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.deciding = 0
        self.holds = 0
        write = processor.write

        def counting(logits, edits, array):
            self.holds += sum(only is not None for _, _, only in edits)
            return write(logits, edits, array)

        monkeypatch.setattr(processor, "write", counting)

    def look(self, proc: processor.RulesProcessor) -> None:
        self.deciding += sum(a.rules.decides_at is not None for a in proc._ruled.values())


def run(requests: list[tuple[dict, str]], seen: Seen, steps: int | None = None) -> None:
    """Each request's answer, one token a step, all in one batch, on `meta` logits."""
    proc = Bias(SimpleNamespace(model_config=None), META, False)
    outs = [[] for _ in requests]
    proc.update_state(BatchUpdate(len(requests), [], [(i, SimpleNamespace(extra_args=a, all_stop_token_ids={END}),
                                                       [1, 2], outs[i]) for i, (a, _) in enumerate(requests)], []))
    tokens = [ENCODE(text) for _, text in requests]
    for step in range(steps or max(map(len, tokens))):
        proc.update_state(None)
        seen.look(proc)
        logits = torch.empty(len(requests), VOCAB, device=META)
        assert proc.apply(logits) is logits
        for out, toks in zip(outs, tokens):
            out.append(toks[step] if step < len(toks) else ENCODE(".")[0])


def test_meta_logits_raise_on_any_read_back():
    """The premise: on `meta` logits every way of reading values back raises."""
    x = torch.empty(2, VOCAB, device=META)
    for read in (lambda: x.argmax(-1).tolist(), lambda: int(x[0].argmax()), lambda: bool((x > 0).any()),
                 lambda: x[(x > 0).any(-1)], lambda: (x > 0).nonzero()):
        with pytest.raises((NotImplementedError, RuntimeError)):
            read()


def test_auto(monkeypatch):
    """`auto`: prose, a call tagged or bare (its name held to the tools' names), the argument close on."""
    seen = Seen(monkeypatch)
    run([(args("auto", 5.5), ANSWERS[name]) for name in ("prose", "tagged", "late", "bare", "spaced bare")], seen)
    assert seen.holds and seen.deciding


def test_required(monkeypatch):
    seen = Seen(monkeypatch)
    run([(args("required", 5.5), ANSWERS[name]) for name in ("bare", "tagged", "loop", "escaped", "close")], seen)
    assert seen.deciding


def test_named(monkeypatch):
    seen = Seen(monkeypatch)
    run([(named(), ANSWERS[name]) for name in ("spaced bare", "close", "escaped")], seen)
    assert seen.deciding


def test_the_argument_close(monkeypatch):
    """The guard decides on the top token at every step of a value once the required arguments are
    written (in a string, after a value, after a backslash in a string), one row and many."""
    seen = Seen(monkeypatch)
    escaped = '{"name": "search", "arguments": {"query": "a \\\\" b\\\\\\" c", "max": 3, "x": {"y": 1}}}'
    run([(args("required", 5.5), ANSWERS["close"])], seen)
    run([(args("required", 5.5), text) for text in (ANSWERS["close"], escaped, ANSWERS["spaced bare"])] * 3, seen)
    # rows with other close biases, and one whose enders also get a ban (after a repeated call)
    call = '{"name": "get_time", "arguments": {}}'
    ban = ENCODE('"}}') + ENCODE('"}') + ENCODE("}}")
    banned = {ARG: {"guard": CallGuard([], REQUIRED, 5.5).pack(),
                    "steering": {"start_bias": 0, "next_bias": 1.0, "call": [1], "opens": ban}}}
    run([(args("required", 3.0), ANSWERS["close"]), (args("auto", 5.5), ANSWERS["late"]),
         (banned, call + call + '{"name": "search", "arguments": {"query": "cats", "n": 1}}')], seen)
    assert seen.deciding >= 40


def test_holds(monkeypatch):
    """A bare call's name held to the declared tools' names, alone and beside unheld rows."""
    seen = Seen(monkeypatch)
    run([(args("steer"), ANSWERS["bare"])], seen)
    run([(args("steer"), ANSWERS["bare"]), (args("auto"), ANSWERS["spaced bare"]), (args("plain"), "x"),
         (args("required", 5.5), ANSWERS["close"])], seen)
    assert seen.holds >= 4


class MetaEngine(Engine):
    """tests/test_call_bias.py's engine (requests come and go, rows move and swap) on `meta` logits."""

    def run(self) -> int:
        steps = 0
        while self.queue or any(self.rows):
            self.update()
            if not self.rows:
                continue
            self.seen.look(self.proc)
            logits = torch.empty(len(self.rows), VOCAB, device=META)
            assert self.proc.apply(logits) is logits
            for r in self.rows:
                r[2].append(r[1][len(r[2])] if len(r[2]) < len(r[1]) else ENCODE(".")[0])
            steps += 1
        return steps


@pytest.mark.parametrize("seed", range(6))
def test_mixed_batches(monkeypatch, seed):
    rng = random.Random(seed)
    kinds = [lambda: args("auto", 5.5), lambda: args("required", 5.5), lambda: args("required"), named,
             lambda: args("steer"), lambda: args("guard", 5.5), lambda: args("plain")]
    requests = [(rng.choice(kinds)(), ENCODE(ANSWERS[rng.choice(sorted(ANSWERS))])) for _ in range(16)]
    seen = Seen(monkeypatch)
    engine = MetaEngine(requests, seed, width=rng.randint(2, 8))
    engine.proc = Bias(SimpleNamespace(model_config=None), META, False)
    engine.seen = seen
    assert engine.run() > 0


def ending(close: float = 0.0, parallel: bool = True) -> dict:
    """`auto` arguments whose answer ends after its calls (toolbridge.steer.ending)."""
    follow = Follow(("</tool_call>", "```"), ("<tool_call>", '{"name": "search"') if parallel else ())
    return to_args(steering(), CallGuard(call_starts(get_dialect("tags")), REQUIRED, close, follow))


def test_the_end_after_calls(monkeypatch):
    """After a complete call, rows are held to what leads to another call or to the end, where the
    top token is one of those (a gated hold: the top compared on the device), beside other rows."""
    seen = Seen(monkeypatch)
    after = ANSWERS["tagged"] + "\nThe weather is nice."
    run([(ending(), after), (ending(5.5), ANSWERS["late"] + "\n" + ANSWERS["tagged"]), (ending(parallel=False), after),
         (args("auto"), after), (args("required", 5.5), ANSWERS["close"])], seen)
    assert seen.holds >= 20
