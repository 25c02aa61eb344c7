"""One answer's per-token rules, in one object that both engines drive: the thinking the prompt opened
(its budget, and no end inside it where the answer must call), then the `auto` steering at the answer's
start and after each call, the call guard, the end after calls, and a call start the start bias chose.

An engine's loop does two things with it, token by token: `read` the tokens it generated, and ask
`next` for the next token's logit changes and the tokens it is held to. Everything else is the
engine's own: its batch, tensors, sampler and grammar. llama.cpp's session drives one per answer
(llamacpp_ext.generate), vLLM's batch logits processor one per row (vllm_plugin.processor); both make it
from the request's plan (`ToolRequest.rules`, or the plan packed into vLLM's request arguments,
`AnswerRules.unpack`).

A call start the bias chose is the one place where the engines differ, because only one of them can
take a token back: llama.cpp asks `chose` after sampling and takes the start back where it goes stray
(`start_stands`); vLLM cannot, so its rules hold the answer to the start or its end (`hold_start`).
"""
from __future__ import annotations

import copy
from typing import Any, Callable, Mapping, Sequence

from .args import banned_from_args, from_args, thinking_from_args
from .callguard import CallGuard
from .ending import Ending
from .logits import Change, start_hold, token_changes
from .steering import BAN, Steering
from .thinking import ThinkingEnd
from .vocab import Vocabulary

Hold = tuple[int, ...]


def unasked() -> str:
    """The model's top token's text where no rule asks for it: never read."""
    return ""


class AnswerRules:
    """One answer's rules and how far they have read it."""

    __slots__ = ("steering", "horizon", "guard", "vocab", "ending", "ends", "thinking", "bans", "hold_start", "ids",
                 "marks", "forming", "opened", "_raised")

    def __init__(self, steering: Steering | None, guard: CallGuard | None, vocab: Vocabulary | None,
                 ends: Sequence[int] = (), thinking: ThinkingEnd | None = None, banned: Sequence[int] = (), *,
                 hold_start: bool = False):
        if vocab is None:  # the guard and the thinking read text: without a vocabulary, steering alone
            guard = thinking = None
        self.steering = steering
        self.horizon = steering.horizon if steering is not None else 0
        self.guard = guard
        self.vocab = vocab
        self.ending: Ending | None = vocab.ending(guard.follow) if guard is not None else None
        self.ends = tuple(ends)  # the engine's end tokens for this request
        self.thinking = thinking  # the thinking the prompt opened, until its close marker is read
        self.bans: list[Change] = [(t, BAN) for t in banned]  # at every step of the answer: an answer in text
        self.hold_start = hold_start  # an engine that cannot take a token back (vLLM): `next` holds a start
        self.ids: list[int] = []  # the answer's tokens: after the thinking (-1: not filled in yet)
        # an unarmed guard reads only the tokens whose text may begin a call start, and those after one
        self.marks = vocab.marks(guard.firsts) if guard is not None and not guard.armed else b""
        self.forming = False  # unarmed: a call start may be forming at the end of the text read
        self.opened: int | None = None  # where in `ids` the bias favoured the call starts, while undecided
        self._raised: list[Change] | None = None  # the last changes, where they favoured a call start

    @classmethod
    def unpack(cls, args: Mapping[str, Any] | None, vocab: Vocabulary | None, ends: Sequence[int],
               prompt_tail: Callable[[], str]) -> "AnswerRules | None":
        """The rules a request's engine arguments carry (toolbridge.steer.args), with the thinking only where
        the prompt opened it (`prompt_tail()`: the text of its last PROMPT_TAIL tokens); None where there
        are none to run. Anything not of toolbridge's making is none."""
        steering, guard = from_args(args)
        thinking = thinking_from_args(args) if vocab is not None else None
        if thinking is not None and not thinking.opened_by(prompt_tail()):
            thinking = None
        banned = banned_from_args(args)
        if steering is None and (vocab is None or guard is None) and thinking is None and not banned:
            return None
        return cls(steering, guard, vocab, ends, thinking, banned, hold_start=True)

    # -- what the engine asks between steps --------------------------------------------------------
    @property
    def watching(self) -> bool:
        """Whether the guard waits for a call start (it reads the answer, and has nothing to say yet)."""
        return self.thinking is None and self.guard is not None and not self.guard.armed

    @property
    def ruled(self) -> bool:
        """Whether `next` may change the next token: inside the thinking, steering within its horizon, an
        armed guard, or an undecided start the bias favoured."""
        return (self.thinking is not None or len(self.ids) < self.horizon or bool(self.bans)
                or (self.guard is not None and self.guard.armed) or self.opened is not None)

    @property
    def done(self) -> bool:
        """Whether nothing the rules do remains: the engine may drop them."""
        return not self.ruled and not self.watching

    @property
    def decides_at(self) -> str | None:
        """Where the guard's argument close decides on the model's top token (CallGuard.decides_at), for
        an engine that decides it on its device; None elsewhere."""
        guard = self.guard
        if self.thinking is None and guard is not None and guard.armed and guard.close_bias:
            return guard.decides_at
        return None

    # -- reading -----------------------------------------------------------------------------------
    def read(self, tokens: Sequence[int], text: str | None = None) -> None:
        """Read the tokens the engine generated since the last read (`text`: theirs, where the engine
        decoded it; else the vocabulary's). Inside the thinking they are read one at a time, and the
        answer starts at the token after the one that completes the close marker."""
        if self.thinking is not None:
            tokens = self._think(tokens)
            if not tokens:
                return
            text = None
        if len(tokens) == 1 and text is None:
            self.catch_up(tokens, 0)
            return
        self.ids += tokens
        guard = self.guard
        if guard is not None:
            known = [t for t in tokens if t >= 0]
            if text is None and known:
                text = self.vocab.text(known[0]) if len(known) == 1 else self.vocab.join(known)
            if text:
                self._feed(text)

    def catch_up(self, ids: Sequence[int], read: int) -> int:
        """Read `ids[read:]`, an engine's own list of the answer's output ids that it appends to (vLLM's); returns
        how many are read now. One new token is the usual step, its text the vocabulary's: where the guard waits
        for a call start and none may be forming, a token whose text holds none of the starts' first characters
        is not read (nor is -1, not filled in yet: it reads the last mark, 0)."""
        n = len(ids)
        if n == read + 1 and self.thinking is None:
            token = ids[read]
            self.ids.append(token)
            guard = self.guard
            if guard is not None and token >= 0 and (guard.armed or self.forming or token >= len(self.marks)
                                                     or self.marks[token]):
                self._feed(self.vocab.text(token))
            return n
        if n > read:
            self.read(ids[read:n])
        return n

    def _feed(self, text: str) -> None:
        guard = self.guard
        guard.feed(text)
        if not guard.armed:
            self.forming = not guard.waiting

    def _think(self, tokens: Sequence[int]) -> Sequence[int]:
        """Read tokens inside the thinking; returns those after its close marker."""
        thinking = self.thinking
        for k, token in enumerate(tokens):
            if token >= 0 and thinking.feed(self.vocab.text(token)):
                self.thinking = None
                return tokens[k + 1:]
        return ()

    def answer_starts(self) -> None:
        """The engine ended the thinking where it found the close marker in its text: the answer starts
        at the next token, whatever the rules read of the marker."""
        self.thinking = None
        self.ids = []

    def retokenized(self, ids: Sequence[int]) -> None:
        """The engine tokenized the answer's text anew (the same text, in other tokens: a phase cut at a
        trigger): the rules read the answer's tokens as these from now on (the guard has read its text)."""
        if self.thinking is None:
            self.ids = list(ids)

    # -- the next token ----------------------------------------------------------------------------
    def next(self, top: Callable[[], str] = unasked, unbiased: bool = False) -> tuple[list[Change], Hold | None]:
        """(token, logit change) for the next token, and the tokens it is held to (None: any). `top()`: the
        text of the model's highest-ranked next token, asked only where the guard decides on it.
        `unbiased`: this position is sampled again without the call starts' bias (a start it chose was
        taken back)."""
        thinking = self.thinking
        if thinking is not None:  # past the budget, the close marker; where the answer must call, no end
            only = thinking.only()
            return ([(t, BAN) for t in self.ends] if thinking.forced and only is None else []), only
        guard = self.guard if self.guard is not None and self.guard.armed else None
        steering = self.steering
        if guard is None and len(self.ids) >= self.horizon and self.opened is None:
            return list(self.bans), None
        vocab = self.vocab
        closers, enders = (vocab.closers, vocab.enders) if guard is not None else ((), ())
        changes, only = token_changes(steering, self.ids, guard, top, closers, enders, self.ending, self.ends)
        if self.bans:
            changes = [*changes, *self.bans]
        if steering is None or not steering.texts or self.vocab is None:
            return changes, only
        if self.hold_start:
            return changes, self._hold(changes, only)
        if unbiased:
            changes = [(t, c) for t, c in changes if c <= 0 or t not in steering.starts]
        self._raised = changes if any(c > 0 and t in steering.starts for t, c in changes) else None
        return changes, only

    def _hold(self, changes: list[Change], only: Hold | None) -> Hold | None:
        """vLLM's start rule (toolbridge.steer.logits.start_hold): the position is noted where the bias
        favours the call starts; from the next step, while the text from there is an open call start,
        the answer goes on with it where the model's top token does, else ends. A step whose last token
        the engine has not filled in yet (-1) decides nothing."""
        ids = self.ids
        if self.opened is not None:
            new = ids[self.opened:]
            if new and new[-1] >= 0 and only is None:
                text = "".join(map(self.vocab.text, new))  # a start's tokens are few
                hold = start_hold(self.steering, text, self.vocab.start_going, self.ends)
                if hold is None:
                    self.opened = None
                return hold
            return only
        if any(c > 0 and t in self.steering.starts for t, c in changes):
            self.opened = len(ids)
        return only

    # -- a start the bias chose, for an engine that takes it back (llama.cpp) -----------------------
    def chose(self, token: int, top: Callable[[], int]) -> bool:
        """Whether `token`, sampled after the last `next`, is a call start's first token that the bias
        chose over the model's own top token (`top()`: its id, before any change)."""
        raised, self._raised = self._raised, None
        return raised is not None and self.steering.bias_chose(token, top(), raised)

    def start_stands(self, text: str) -> bool | None:
        """Whether a start the bias chose stands, given the answer's text from its first token on: True
        (a call follows), False (stray: take it back), None (undecided)."""
        return self.steering.start_stands(text)

    def mark(self) -> "AnswerRules":
        """The rules as they are now, to go back to (`restore`): what they have read, not the plan."""
        kept = copy.copy(self)
        kept.ids = list(self.ids)
        kept.guard = copy.deepcopy(self.guard)
        return kept

    def restore(self, kept: "AnswerRules") -> None:
        for name in self.__slots__:
            setattr(self, name, getattr(kept, name))
        self.ids = list(kept.ids)
        self.guard = copy.deepcopy(kept.guard)
