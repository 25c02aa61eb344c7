"""The per-token logit policy of an answer, written once for every engine: the `auto` steering at
the answer's start (toolbridge.steer) and the guard of a call being generated (toolbridge.callguard).

`token_changes` is the rule: given the answer's tokens so far, what the next token's logits need.
An engine's adapter only writes its result into its own logits (llamacpp_ext.generate in its
sampling loop, vllm_plugin.bias for a whole batch at once): each change added to its token's logit,
then, where the answer is held to some tokens (`only`) and at least one of them is still finite,
every other token set to -inf (where all of them are -inf something else forbids them, and the hold
gives way).

The guard reads the answer's text; an `auto` answer's guard only looks for a call start until one
is written, and text holding none of the starts' first characters cannot be one (`start_marks`
marks the tokens whose text may, so an engine that reads tokens reads the text of those alone).
"""
from __future__ import annotations

from typing import Callable, Sequence

from .callguard import CallGuard
from .steer import Steering

Change = tuple[int, float]


def token_changes(steering: Steering | None, answer: Sequence[int], guard: CallGuard | None,
                  top: Callable[[], str], closers: Sequence[int],
                  enders: Sequence[tuple[int, str]]) -> tuple[list[Change], tuple[int, ...] | None]:
    """(token, logit change) for the next token, and the tokens it is held to (None: any), given
    the answer's tokens so far (`answer`) and the guard that has read its text; `top()`: the text of
    the model's highest-ranked next token, asked only where the guard decides on it
    (`CallGuard.wants_top`). Steering speaks within its horizon, the guard once it is armed."""
    changes: list[Change] = []
    only = None
    if steering is not None and len(answer) < steering.horizon:
        changes, only = steering.changes(answer), steering.only(answer)
    if guard is not None:
        guarded = guard.changes(top, closers, enders)
        if guarded:
            changes = [*changes, *guarded]
    return changes, only


def start_marks(texts: Sequence[str], firsts: str) -> bytearray:
    """For each token id, 1 where its text (`texts[id]`) holds one of `firsts` (a guard's
    CallGuard.firsts): a call start can only begin in such a token. One more entry, 0, follows the
    last id, so that a placeholder id of -1 reads as 'nothing here'."""
    if not firsts:
        return bytearray(len(texts) + 1)
    return bytearray([any(c in text for c in firsts) for text in texts] + [False])
