"""The `auto` call steering: small models rank "start a call" well but rarely enough to win
greedy decoding, so the first token of every way a call may start (the dialect's marker, and a
bare JSON call object, which tool-trained models write instead: toolbridge.constrain.grammar.call_starts)
gets a bias at the answer's first position (bench/accuracy measured it). A bare JSON call started
there names a declared tool: its name is held to the tools' names, token by token, up to the name's
closing quote, where the grammar takes over (toolbridge.constrain.grammar.entries): a model pushed into `{"`
may go on with a name of its own, which no constraint arms on (docs/measurements.md). A tool result the model starts writing itself (`<tool_response>`, which shares
`<tool_call>`'s first tokens) is cut where the two markers part: a model never writes tool results.
All of it applies only at the answer's start, and only when the answer follows a user turn (after
tool results the model should mostly answer, not call again); a bias of 0 turns it off. A
negative bias (after tool results, or on a question whose words meet no tool's: toolbridge.steer.relevance)
holds back every token that opens a JSON object or a code fence as well: a tool-trained model opens
its calls that way too (held back from the call starts alone, such a model opens a code fence instead).

Parallel calls: right after an answer's first call, where a model either ends its turn or starts
another call, every call start's first token gets the next-call bias (`next_bias`; the guard of the call
tells when a call has just been written: toolbridge.steer.callguard.CallGuard.between). Only after the
first call: after two, a model that means to go on does so by itself. A call that repeats an earlier
one of the same answer (whitespace aside) ends the calls: no call start and no token that opens an
object or a code fence may follow it (a model that repeats goes on until max_tokens otherwise).

With the `asked` word check, the tools the question names (toolbridge.steer.relevance.asked_for) move
the same decision: right after the first call, one of them still uncalled adds `again`; after a later
call, with two or more named and each called, the call starts get `enough` (the policy's rule:
toolbridge.steer.policy.after_call_bias).

A start the bias chose is the bias's, not the model's: where a positive bias made a call start's first
token win over the model's own top token (`bias_chose`), that token stands only if the model goes on to
write the call start whole (`start_stands`: undecided while the text since it is a proper prefix of a
call start, standing once it holds one, stray once it leaves them all). Without this, the bias's `<` at the top of
a plain answer becomes the model's own markup (SmolLM2, asked for two lines about autumn, wrote `<pre>`).
An engine that can take tokens back (llama.cpp's session) takes a stray start back and samples that
position again without the bias; vLLM's processor cannot (docs/architecture.md).

Each engine applies `Steering.changes` in its own logits processor; the steering travels to
it as plain data (`pack` / `unpack`), within the request's one toolbridge argument (toolbridge.steer.args).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from ..dialects import BARE_JSON, Dialect
from ..constrain.grammar import call_starts
from .policy import after_call_bias

# A banned token's logit change: far below any logit, yet finite, so that where a grammar allows only
# banned tokens the grammar's choice still stands. Qwen2.5-Coder-0.5B, its call starts banned after a
# repeated call, started another with `={"` (a token no ban covers); the lazy grammar took the call, and
# at its arguments' `{` every token was -inf: llama.cpp's grammar then aborts the server process (vLLM
# ends the request with an error).
BAN = -1e4
# Texts whose first token opens a JSON object or a code fence another way than a call start does
# (`{` then a newline: a pretty-printed call the parser reads as well).
_OPENERS = ("{", "{\n", "{\n\n", "```", "```json", "```\n")


@dataclass(frozen=True)
class Steering:
    call: tuple[int, ...]  # the tokens the dialect's call marker starts with
    result: tuple[int, ...]  # the tokens a tool result starts with
    start_bias: float  # at the answer's first token, on every call start (toolbridge.steer.policy.Decisions)
    starts: tuple[int, ...] = ()  # the first tokens of every call start (default: call[0])
    heads: tuple[tuple[int, ...], ...] = ()  # a bare JSON call's opening: `{"name": "`, ` {"name": "`
    names: tuple[tuple[int, ...], ...] = ()  # ... followed by a declared tool's name and its quote
    next_bias: float = 0.0  # the bias on the call starts right after a call (another call), 0: none
    opens: tuple[int, ...] = ()  # the first tokens of a JSON object or a code fence (banned after a repeat)
    asked: frozenset[str] = frozenset()  # the tools the question names by words only they have (toolbridge.steer.relevance)
    again: float = 0.0  # added to `next` when the first call leaves one of `asked` uncalled
    enough: float = 0.0  # on the call starts after a later call, once two or more `asked` are all called
    texts: tuple[str, ...] = ()  # the call starts' texts (toolbridge.constrain.grammar.call_starts)

    def __post_init__(self) -> None:
        if not self.starts and self.call:
            object.__setattr__(self, "starts", self.call[:1])

    @classmethod
    def for_dialect(cls, dialect: Dialect, encode: Callable[[str], list[int]], tools: Sequence[str] = (), *,
                    start_bias: float = 0.0, next_bias: float = 0.0) -> "Steering":
        """The steering for calls in `dialect` to the tools named, in a tokenizer's ids. Each
        call start counts as written at a line's start and after a space (` {"` is one token in
        many vocabularies)."""
        space = encode(" ")[:1]

        def first_tokens(texts: Sequence[str]) -> list[int]:
            firsts = []
            for text in texts:
                firsts += encode(text)[:1]
                spaced = encode(" " + text)[:1]
                if spaced and spaced != space:
                    firsts += spaced
            return firsts

        firsts, heads, names = first_tokens(call_starts(dialect)), [], []
        for opening in (BARE_JSON.call[0], " " + BARE_JSON.call[0]):
            head = encode(opening)
            heads.append(tuple(head))
            names += [tuple(head + encode(name + '"')) for name in tools]
        return cls(call=tuple(encode(dialect.grammar_trigger)),
                   result=tuple(encode(dialect.result_marker)) if dialect.result_marker else (),
                   start_bias=float(start_bias), starts=tuple(dict.fromkeys(firsts)),
                   heads=tuple(heads) if names else (), names=tuple(dict.fromkeys(names)),
                   next_bias=float(next_bias), texts=call_starts(dialect),
                   opens=tuple(dict.fromkeys(t for t in first_tokens(_OPENERS) if t not in firsts)))

    @property
    def openings(self) -> tuple[int, ...]:
        """Every first token a call may be written after: the call starts, and the tokens that open
        a JSON object or a code fence (a tool-trained model also opens its calls with ```` ``` ````
        or `{` and a newline, which the parser reads)."""
        return (*self.starts, *self.opens)

    @property
    def firsts(self) -> tuple[int, ...]:
        """The first tokens the answer-start bias applies to: the call starts, or every opening
        where it is against a call."""
        return self.starts if self.start_bias > 0 else self.openings

    @property
    def horizon(self) -> int:
        """How many output tokens steering can touch: past it, `changes` and `only` say nothing."""
        return max(1, len(self.result), *map(len, self.names))

    def only(self, output: Sequence[int]) -> tuple[int, ...] | None:
        """The tokens allowed next, given the answer's tokens so far: once the answer has written
        a bare JSON call's opening (`{"name": "`), the next token of a declared tool's name; None
        (no restriction) anywhere else."""
        n = len(output)
        if n == 0 or n >= self.horizon:
            return None
        out = tuple(output)
        if not any(n >= len(h) and out[:len(h)] == h for h in self.heads):
            return None
        return tuple(sorted({p[n] for p in self.names if len(p) > n and p[:n] == out})) or None

    def changes(self, output: Sequence[int]) -> list[tuple[int, float]]:
        """(token, logit change) for the next token, given the answer's tokens so far: each call
        start's first token favoured at the start (or disfavoured, with the openers: `firsts`); the
        token where a tool result's marker leaves the call marker banned while the answer is a
        prefix of it."""
        n = len(output)
        if n >= self.horizon:
            return []
        call, result = self.call, self.result
        changes = [(t, self.start_bias) for t in self.firsts] if n == 0 and self.start_bias else []
        if n < len(result) and tuple(output) == result[:n]:
            on_call_path = n < len(call) and tuple(output) == call[:n] and call[n] == result[n]
            if not on_call_path:
                changes.append((result[n], BAN))
        return changes

    def bias_chose(self, token: int, top: int, changes: Sequence[tuple[int, float]]) -> bool:
        """Whether `token`, chosen where the model's own top token (no changes) was `top`, is a call
        start's first token that won by a positive change on it (the start or next-call bias)."""
        return token != top and token in self.starts and any(t == token and c > 0 for t, c in changes)

    def start_stands(self, text: str) -> bool | None:
        """Whether a start the bias chose stands, given the answer's text from that token on
        (`start_state` over the steering's call starts)."""
        return start_state(text, self.texts)

    def after_call(self, called: Sequence[str], repeated: bool = False) -> list[tuple[int, float]]:
        """(token, logit change) for a token after an answer's calls (`called`: their names, in
        order): anywhere after a call the answer already held (`repeated`), each call start's first
        token banned, and each token that opens a JSON object or a code fence (the model has started
        repeating itself and would go on until max_tokens); right after the first
        (toolbridge.steer.callguard.CallGuard.between) and after later ones, the policy's bias
        (toolbridge.steer.policy.after_call_bias). A bias against a call holds back every opening, as
        at the answer's start."""
        if repeated:
            return [(t, BAN) for t in self.openings]
        bias = after_call_bias(called, next_bias=self.next_bias, asked=self.asked, again=self.again,
                               enough=self.enough)
        return [(t, bias) for t in (self.starts if bias > 0 else self.openings)] if bias else []

    def pack(self) -> dict:
        """The steering as plain data (lists, numbers, strings), for `unpack`."""
        data = {"start_bias": self.start_bias, "call": list(self.call), "result": list(self.result),
                "starts": list(self.starts), "names": [list(self.heads), list(self.names)],
                "next_bias": self.next_bias, "opens": list(self.opens), "texts": list(self.texts)}
        if self.asked and (self.again or self.enough):
            data["again"] = [sorted(self.asked), self.again, self.enough]
        return data

    @classmethod
    def unpack(cls, data: Mapping[str, Any] | None) -> "Steering | None":
        """The steering `pack` made, or None (none asked for, turned off, or not of toolbridge's
        making: a client can send request arguments too, and an engine that raised on them would
        fail every request it is running)."""
        if not isinstance(data, Mapping):
            return None
        call, start_bias, next_bias = data.get("call"), data.get("start_bias"), data.get("next_bias")
        if not call or not (start_bias or next_bias or data.get("again")):
            return None
        try:
            heads, names = data.get("names") or ((), ())
            asked, again, enough = data.get("again") or ((), 0.0, 0.0)
            return cls(call=tuple(int(t) for t in call), result=tuple(int(t) for t in data.get("result") or ()),
                       start_bias=float(start_bias or 0), starts=tuple(int(t) for t in data.get("starts") or ()),
                       heads=_paths(heads), names=_paths(names), next_bias=float(next_bias or 0),
                       opens=tuple(int(t) for t in data.get("opens") or ()), asked=frozenset(str(n) for n in asked),
                       again=float(again), enough=float(enough),
                       texts=tuple(str(t) for t in data.get("texts") or ()))
        except (TypeError, ValueError):
            return None


def start_state(text: str, starts: Sequence[str]) -> bool | None:
    """Where a text stands against call starts: True once it holds a whole one (a call follows), False once
    it has left every one (stray), None while it is empty or a proper prefix of one. Spaces before count."""
    t, texts = text.lstrip(" "), [s.lstrip(" ") for s in starts]
    if any(t.startswith(s) for s in texts):
        return True
    return None if any(s.startswith(t) for s in texts) else False


def _paths(paths: Any) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(int(t) for t in p) for p in paths)
