"""What vLLM's batch logits processor (vllm_plugin.processor.RulesProcessor) keeps beside the batch: each row's
answer and its rules (`Row`), and a vocabulary's argument-close tables on
the logits' device (`CloseTables`)."""
from __future__ import annotations

from typing import Any

import torch

from toolbridge.engine import POINTS, AnswerRules, Vocabulary


class Row:
    """One batch row's answer: vLLM's own list of its output token ids, its rules (toolbridge.steer.rules),
    and how many of the ids they have read."""

    __slots__ = ("ids", "rules", "read")

    def __init__(self, ids: list[int], rules: AnswerRules):
        self.ids = ids  # vLLM appends to it, and completes it before logits processors run
        self.rules = rules
        self.read = 0

    def catch_up(self) -> None:
        """The rules read the tokens vLLM added since the last step (one, usually)."""
        if len(self.ids) != self.read:
            self.read = self.rules.catch_up(self.ids, self.read)


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
