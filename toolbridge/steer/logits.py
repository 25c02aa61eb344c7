"""The per-token logit policy of an answer, written once for every engine: the `auto` steering at
the answer's start (toolbridge.steer.steering) and the guard of a call being generated (toolbridge.steer.callguard).

`token_changes` is the rule: given the answer's tokens so far, what the next token's logits need.
An engine's adapter only writes its result into its own logits (llamacpp_ext.generate in its
sampling loop, vllm_plugin.processor for a whole batch at once): each change added to its token's logit,
then, where the answer is held to some tokens (`only`) and at least one of them is still finite,
every other token set to -inf (where all of them are -inf something else forbids them, and the hold
gives way).

The guard reads the answer's text; an `auto` answer's guard only looks for a call start until one
is written, and text holding none of the starts' first characters cannot be one (`start_marks`
marks the tokens whose text may, so an engine that reads tokens reads the text of those alone).
"""
from __future__ import annotations

import math
from typing import Any, Callable, Sequence

from .callguard import CallGuard
from .ending import Ending
from .steering import Steering

Change = tuple[int, float]
Edit = tuple[int, Sequence[Change], Sequence[int] | None]  # a row, its changes, its held tokens


class Gated(tuple):
    """A hold that stands where the row's top token, once its changes are added, is one of its
    tokens; elsewhere the row is held to `otherwise`. After a call, the answer goes on (another
    call, whitespace, closing markup) only where the model itself goes on that way; where it would
    write anything else, it ends (`otherwise`: the end tokens)."""

    otherwise: tuple[int, ...]

    def __new__(cls, tokens: Sequence[int], otherwise: Sequence[int]) -> "Gated":
        held = super().__new__(cls, tokens)
        held.otherwise = tuple(otherwise)
        return held


def token_changes(steering: Steering | None, answer: Sequence[int], guard: CallGuard | None,
                  top: Callable[[], str], closers: Sequence[int], enders: Sequence[tuple[int, str]],
                  ending: Ending | None = None, ends: Sequence[int] = ()) -> tuple[list[Change], tuple[int, ...] | None]:
    """(token, logit change) for the next token, and the tokens it is held to (None: any), given
    the answer's tokens so far (`answer`) and the guard that has read its text; `top()`: the text of
    the model's highest-ranked next token, asked only where the guard decides on it
    (`CallGuard.wants_top`). Steering speaks within its horizon, right after a call (its next-call
    bias) and anywhere after a repeated call (no call starts), the guard once it is armed. After a
    complete call, the answer is held to what may lead to another call or to its end, where the
    model's top choice is one of those, else to its end (a `Gated` hold; `ending`: the guard's Follow
    in this vocabulary's tokens, toolbridge.steer.ending; `ends`: the engine's end tokens)."""
    changes: list[Change] = []
    only = None
    if steering is not None and len(answer) < steering.horizon:
        changes, only = steering.changes(answer), steering.only(answer)
    if guard is not None:
        guarded = guard.changes(top, closers, enders)
        if steering is not None and (guard.between or guard.repeated):
            guarded = [*guarded, *steering.after_call(guard.called, guard.repeated)]
        if guarded:
            changes = [*changes, *guarded]
        if ending is not None and guard.tail is not None:
            allowed = ending.allowed(guard.tail)
            if allowed is not None:
                only = Gated((*ends, *allowed), ends) if allowed else tuple(ends)
    return changes, only


def start_hold(steering: Steering, opened: str, going: Callable[[tuple[str, ...], str], tuple[int, ...]],
               ends: Sequence[int]) -> Gated | None:
    """For an engine that cannot take a token back (vLLM): while the answer's text from a position where
    the bias favoured the call starts (`opened`) is a proper prefix of a call start, the answer goes on
    with the start where the model's top token does so, and ends there where it would write anything
    else (a start the bias chose, left half-written: the adapter's front asks again without the bias).
    None once the start stands or has left every start (or the engine has no end tokens to hold to).
    `going(texts, partial)`: the tokens that go on with a start (Vocabulary.start_going)."""
    if not ends or steering.start_stands(opened) is not None:
        return None
    return Gated((*going(steering.texts, opened), *ends), ends)


def start_marks(texts: Sequence[str], firsts: str) -> bytearray:
    """For each token id, 1 where its text (`texts[id]`) holds one of `firsts` (a guard's
    CallGuard.firsts): a call start can only begin in such a token. One more entry, 0, follows the
    last id, so that a placeholder id of -1 reads as 'nothing here'."""
    if not firsts:
        return bytearray(len(texts) + 1)
    return bytearray([any(c in text for c in firsts) for text in texts] + [False])


def write(logits: Any, edits: Sequence[Edit], array: Callable[..., Any]) -> None:
    """Write rows' changes into 2-D logits (a numpy array or a torch tensor), in place: every change
    added (changes to one token add up), then each held row's other tokens set to -inf where one of
    its held tokens at least is finite (else something else forbids them all, and the row is left as
    it is). Token ids outside the logits are skipped (they may come from a request's arguments).
    `array(values, dtype=None)`: the engine's array of a list (indexes, or values in `dtype`).
    On torch tensors nothing is read back (masks and indexed writes only): on a GPU it queues its work
    and never waits for the device. Numpy arrays (llama.cpp's, on the host) index with the mask."""
    vocab = logits.shape[-1]
    added: dict[tuple[int, int], float] = {}
    held_rows: list[int] = []
    held: list[list[int]] = []
    gates: list[tuple[int, list[int]]] = []  # (index in held, the tokens held to where the top is not held)
    for row, changes, only in edits:
        for token, change in changes:
            if 0 <= token < vocab:
                added[row, token] = added.get((row, token), 0.0) + change
        if only is not None:
            kept = [t for t in only if 0 <= t < vocab]
            if kept:
                if isinstance(only, Gated):
                    gates.append((len(held), [t for t in only.otherwise if 0 <= t < vocab]))
                held_rows.append(row)
                held.append(kept)
    if added:
        rows, tokens = array([r for r, _ in added]), array([t for _, t in added])
        logits[rows, tokens] += array(list(added.values()), logits.dtype)
    if held_rows:
        at = array(held_rows)
        sub = logits[at]
        keep = sub < -math.inf  # all false, of the engine's own kind
        keep[array([i for i, kept in enumerate(held) for _ in kept]), array([t for kept in held for t in kept])] = True
        if gates:
            _gate(sub, keep, gates, array)
        if hasattr(sub, "masked_fill_"):  # torch: masks on the device, none read back to index with
            open_ = (sub > -math.inf).logical_and_(keep).any(-1, keepdim=True)  # a held token is still finite
            sub.masked_fill_(keep.logical_not_().logical_and_(open_), -math.inf)
            logits[at] = sub
        else:  # numpy: on the host already
            sub[~keep] = -math.inf
            open_ = (sub > -math.inf).any(-1)
            logits[at[open_]] = sub[open_]


def _gate(sub: Any, keep: Any, gates: Sequence[tuple[int, list[int]]], array: Callable[..., Any]) -> None:
    """Gated holds (`Gated`): where the row's top token (its changes added) is not held, hold the row
    to its `otherwise` tokens instead. On the device: the top is compared there, not read back."""
    rows = array([i for i, _ in gates])
    top = sub[rows].argmax(-1)
    stays = keep[rows, top][:, None]
    other = sub[rows] < -math.inf
    pairs = [(k, t) for k, (_, tokens) in enumerate(gates) for t in tokens]
    if pairs:
        other[array([k for k, _ in pairs]), array([t for _, t in pairs])] = True
    keep[rows] = (keep[rows] & stays) | (other & ~stays)
