"""The steering policy: every decision toolbridge moves while an answer is generated, in one object.

Its fields are the decision points, in the order an answer meets them:
- the answer's start: a call or text, after a user turn (`start_after_user`) or after tool results
  (`start_after_results`): nats on every call start's first token (toolbridge.steer.steering);
- inside a call, after every required argument: close it or go on (`close`, toolbridge.steer.callguard);
- right after the first call: another call or the end (`next_call`);
- a call that repeats one of the same answer: no call may start after it (always on: structural);
- after the calls: only another call or the end of the turn (`end_after_calls`, toolbridge.steer.ending).

Two switches add what is not structural: `words`, the English word checks (toolbridge.steer.relevance,
toolbridge.steer.grounding), which move the start and the next call by fixed amounts (UNRELATED, AGAIN,
ENOUGH) or answer again without a call; and `formats`, the argument patterns read from the
descriptions' examples (toolbridge.constrain.formats, applied where the grammar is built).
"""
from __future__ import annotations

from dataclasses import dataclass

# The word checks' amounts, chosen on BFCL's live questions (docs/measurements.md): a question
# whose words meet no tool's; a tool the question names still uncalled after the first call; two or
# more named tools, each called.
UNRELATED, AGAIN, ENOUGH = -8.0, 3.5, -5.0


@dataclass(frozen=True)
class Policy:
    start_after_user: float = 0.0
    start_after_results: float = 0.0
    next_call: float = 0.0
    close: float = 0.0
    end_after_calls: bool = True
    words: frozenset[str] = frozenset()  # of toolbridge.options.WORD_CHECKS
    formats: bool = False

    def start(self, after_user: bool, unrelated: bool) -> float:
        """The bias on a call's start at the answer's first token."""
        if not after_user:
            return self.start_after_results
        return self.start_after_user + (UNRELATED if unrelated and "unrelated" in self.words else 0.0)

    @property
    def asked(self) -> bool:
        """The tools a question names move the next-call decision."""
        return "asked" in self.words

    @property
    def again(self) -> float:
        return AGAIN if self.asked else 0.0

    @property
    def enough(self) -> float:
        return ENOUGH if self.asked else 0.0

    @property
    def grounded(self) -> bool:
        """An `auto` answer's first call must take its values from the conversation."""
        return "grounded" in self.words
