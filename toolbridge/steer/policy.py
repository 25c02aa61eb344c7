"""The steering policy: every decision toolbridge moves while an answer is generated, made here.

`Policy` holds one field per knob of the option table, named as the knob (`tb_call_bias` is
`call_bias`, here, in `Decisions` and in the engines' `Steering`), and `decide` makes one answer's
decisions from it, in the order an answer meets them:
- the answer's start: a call or text, after a user turn (`call_bias`) or after tool results
  (`result_bias`): nats on every call start's first token (toolbridge.steer.steering);
- inside a call, after every required argument: close it or go on (`close_bias`, toolbridge.steer.callguard);
- right after the first call: another call or the end (`next_bias`, where parallel calls are allowed);
  after later calls, the tools the question named (`after_call_bias`);
- a call that repeats one of the same answer: no call may start after it (always on: structural);
- after the calls: only another call or the end of the turn (`end_after_calls`, toolbridge.steer.ending).
Where the prompt opens a thinking block, the answer starts after it: every decision above counts from
there, and `thinking_budget` closes the block after that many tokens, so a forced call always comes.

Two switches add what is not structural: `word_checks`, the English word checks (toolbridge.steer.relevance,
toolbridge.steer.grounding), which move the start and the next call by fixed amounts (UNRELATED, AGAIN,
ENOUGH) or answer again without a call; and `formats`, the argument patterns read from the
descriptions' examples (toolbridge.constrain.formats, applied where the grammar is built).
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Mapping, Protocol, Sequence

# The word checks' amounts, chosen on BFCL's live questions (docs/measurements.md): a question
# whose words meet no tool's; a tool the question names still uncalled after the first call; two or
# more named tools, each called.
UNRELATED, AGAIN, ENOUGH = -8.0, 3.5, -5.0
WORD_CHECKS = ("unrelated", "asked", "grounded")


class Question(Protocol):
    """What the word checks read of a request (toolbridge.request.CheckedRequest), only when asked."""

    @property
    def unrelated(self) -> bool: ...

    @property
    def asked(self) -> frozenset[str]: ...


@dataclass(frozen=True)
class Decisions:
    """One answer's steering, as `Policy.decide` made it; the plan keeps it and the engines read it."""

    steers: bool = False  # the `auto` steering applies at all (toolbridge.steer.steering)
    start_bias: float = 0.0  # at the answer's first token, on every call start
    next_bias: float = 0.0  # right after the first call, on every call start
    asked: frozenset[str] = frozenset()  # the tools the question names, where they move the next call
    again: float = 0.0  # right after the first call, with one of `asked` uncalled
    enough: float = 0.0  # after later calls, with two or more of `asked`, each called
    close_bias: float = 0.0  # inside a call, after every required argument, on closing it
    end_after_calls: bool = True  # text after a complete call is not the answer's
    # the engines hold the token after a complete call (toolbridge.steer.ending): where text after calls is
    # not the answer's, and where parallel calls are off (no second call is generated, whatever the option)
    hold_after_calls: bool = False
    in_text: bool = False  # asked again in text: every call opening banned (ToolRequest.in_text)
    grounded: bool = False  # the first call's values must come from the conversation
    formats: bool = False  # string arguments follow their description's examples
    thinking_budget: int | None = None  # a thinking block the prompt opens is closed after this many tokens


@dataclass(frozen=True)
class Policy:
    """The knobs, one field each (the option `tb_<field>`); built by keyword (`from_options`)."""

    call_bias: float = 0.0
    result_bias: float = 0.0
    next_bias: float = 0.0
    close_bias: float = 0.0
    end_after_calls: bool = True
    word_checks: frozenset[str] = frozenset()  # of WORD_CHECKS
    formats: bool = False
    thinking_budget: int | None = None

    @classmethod
    def from_options(cls, values: Mapping[str, Any]) -> "Policy":
        """The policy of resolved option values (`tb_<field>` -> field)."""
        return cls(**{f.name: values["tb_" + f.name] for f in fields(cls)})

    def decide(self, *, lazy: bool, after_user: bool, parallel: bool, question: Question) -> Decisions:
        """One answer's decisions. `lazy`: under `auto` (free text until a call starts; the other
        modes are constrained whole, and only the close, the formats and the parser's end after calls
        apply); `after_user`: the answer follows a user turn, not tool results; `question`: read only
        where a word check asks."""
        words = lazy and after_user  # the word checks read user turns
        if not after_user:
            start = self.result_bias
        elif words and "unrelated" in self.word_checks and question.unrelated:
            start = self.call_bias + UNRELATED
        else:
            start = self.call_bias
        named = "asked" in self.word_checks
        asked = question.asked if words and parallel and named else frozenset()
        next_bias = self.next_bias if parallel else 0.0
        return Decisions(steers=lazy and bool(start or next_bias or asked), start_bias=start, next_bias=next_bias,
                         asked=asked, again=AGAIN if named else 0.0, enough=ENOUGH if named else 0.0,
                         close_bias=self.close_bias, end_after_calls=self.end_after_calls,
                         hold_after_calls=lazy and (self.end_after_calls or not parallel),
                         grounded=lazy and "grounded" in self.word_checks, formats=self.formats,
                         thinking_budget=self.thinking_budget)


def after_call_bias(called: Sequence[str], *, next_bias: float, asked: frozenset[str], again: float,
                    enough: float) -> float:
    """The bias on every call start after an answer's calls (`called`: their names, in order): right
    after the first, `next_bias`, and `again` more where a tool the question named is uncalled; after
    later ones, `enough` where the question named two or more tools and each is called, else none
    (a model that means to go on does so by itself)."""
    left = bool(asked.difference(called))
    if len(called) == 1:
        return next_bias + (again if left else 0.0)
    return enough if len(asked) > 1 and not left else 0.0
