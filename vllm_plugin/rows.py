"""What vLLM's batch logits processor (vllm_plugin.bias.CallBias) keeps beside the batch: each row's
answer, its rules and how far they have read it (`Answer`), and a vocabulary's argument-close tables on
the logits' device (`CloseTables`)."""
from __future__ import annotations

from typing import Any

import torch

from toolbridge.engine import POINTS, CallGuard, Ending, Steering, ThinkingEnd, Vocabulary


class Answer:
    """One request's rules and how far its guard has read its output."""

    __slots__ = ("ids", "steering", "horizon", "guard", "read", "forming", "marks", "ending", "ends", "thinking",
                 "start", "opened")

    def __init__(self, ids: list[int], steering: Steering | None, guard: CallGuard | None, marks: bytearray,
                 ending: Ending | None = None, ends: tuple[int, ...] = (), thinking: ThinkingEnd | None = None):
        self.ids = ids  # vLLM's own list of the request's output token ids (it appends to it)
        self.thinking = thinking  # the thinking the prompt opened, until it ends
        self.start = 0  # where the answer starts in `ids`: after the thinking
        self.steering = steering
        self.horizon = steering.horizon if steering is not None else 0
        self.guard = guard
        self.read = 0  # output tokens the guard has read
        self.forming = False  # unarmed guard: a call start may be forming at the end of its text
        self.marks = marks  # the tokens whose text may begin one of the guard's call starts
        self.ending = ending  # what may follow a complete call, in the vocabulary's tokens (toolbridge.steer.ending)
        self.ends = ends  # the request's end tokens (end of sequence, the model's other end-of-turn tokens)
        self.opened: int | None = None  # where in `ids` the bias last favoured the call starts, while it may speak

    @property
    def ruled(self) -> bool:
        """Whether the rule may speak at this step: steering within its horizon, or an armed guard."""
        return (len(self.ids) - self.start < self.horizon or (self.guard is not None and self.guard.armed)
                or self.opened is not None)

    @property
    def answer(self) -> list[int]:
        """The answer's tokens, as far as steering reads them (its horizon): after the thinking."""
        return self.ids if not self.start else self.ids[self.start:self.start + self.horizon]

    @property
    def watching(self) -> bool:
        return self.guard is not None and not self.guard.armed


def end_tokens(params: Any) -> tuple[int, ...]:
    """The tokens that end a request's answer: vLLM's stop token ids for it (the end of sequence unless
    ignore_eos, the model's other end tokens, the request's stop_token_ids)."""
    try:
        return tuple(sorted(int(t) for t in getattr(params, "all_stop_token_ids", None) or ()))
    except (TypeError, ValueError):
        return ()


POINT = {p: k for k, p in enumerate(POINTS)}
NEVER = len(POINTS)  # the row of `going` where no token goes on


class CloseTables:
    """A vocabulary's argument-close tables on one device, for logits `width` wide: `going`, for each
    decision point (toolbridge.steer.callguard.POINTS) then each token, whether the token goes on to another
    argument there (flat: point * width + token; a last row, NEVER, all False); `tokens`, each
    point's tokens that end the arguments, padded to one length with its first (written twice,
    alike); `ends`, each point's ending tokens as a set."""

    __slots__ = ("going", "tokens", "ends")

    def __init__(self, vocab: Vocabulary, width: int, device: torch.device, pin: bool):
        going = torch.zeros((len(POINTS) + 1) * width, dtype=torch.bool, pin_memory=pin)
        flat = [k * width + t for k, p in enumerate(POINTS) for t in vocab.going_on[p] if 0 <= t < width]
        if flat:
            going[flat] = True
        ends = [tuple(t for t in vocab.ending_at[p] if 0 <= t < width) for p in POINTS]
        self.ends = [frozenset(e) for e in ends]
        m = max(map(len, ends))
        tokens = torch.tensor([[*e, *(e[:1] or (0,)) * (m - len(e))] for e in ends], dtype=torch.long)
        self.going, self.tokens = (t.to(device, non_blocking=True) for t in (
            going, tokens.pin_memory() if pin else tokens))
