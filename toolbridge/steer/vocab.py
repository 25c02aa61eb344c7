"""A tokenizer as the core's logit rules see it, written once for every engine: how text encodes,
each token's text, and the token tables derived from them (the tokens that close a string, that
end a call's arguments, that may begin a call start, and a request's steering), each built once
per vocabulary (and per tool set, for the steering).

An adapter builds its engine's view once per tokenizer and keeps it on the tokenizer (or model)
object, so it lives exactly as long as the tokenizer it calls; its `key` names the vocabulary
stably (a model's path or name, never an object's id) for what is kept per tool set."""
from __future__ import annotations

from functools import cached_property
from typing import Any, Callable, Hashable

from .callguard import POINTS, closers, enders, ending_at, goes_on
from .ending import Ending, Follow, gap_tokens
from .logits import start_marks
from ..memo import Memo



class Vocabulary:
    def __init__(self, key: Hashable, encode: Callable[[str], list[int]], decode: Callable[[int], str], size: int,
                 join: Callable[[list[int]], str] | None = None):
        self.key = key
        self.encode = encode  # text -> token ids, no special tokens added
        self.decode = decode  # one token id -> its text
        self.size = size
        self.join = join or (lambda ids: "".join(map(self.text, ids)))  # several tokens -> their text
        self._marks: Memo[bytearray] = Memo(16)
        self._endings: Memo[Ending] = Memo(16)
        self._markers: Memo[tuple[int, ...]] = Memo(16)
        self._going: Memo[tuple[int, ...]] = Memo(64)

    @cached_property
    def texts(self) -> list[str]:
        """Every token's text, by id (decoded once)."""
        return [self.decode(t) for t in range(self.size)]

    def text(self, token: int) -> str:
        """A token's text: from the table once it is built, else decoded ("" for no token)."""
        if "texts" in self.__dict__:
            return self.texts[token] if 0 <= token < self.size else ""
        return self.decode(token) if 0 <= token < self.size else ""

    @cached_property
    def closers(self) -> tuple[int, ...]:
        """The tokens that begin with a string's closing quote (toolbridge.steer.callguard)."""
        return closers(self.encode)

    @cached_property
    def enders(self) -> tuple[tuple[int, str], ...]:
        """The tokens that may end a call's arguments, with their texts (toolbridge.steer.callguard)."""
        return enders(self.encode, self.text)

    def marker(self, text: str) -> tuple[int, ...]:
        """A marker's tokens (a thinking block's close: every request's), encoded once."""
        return self._markers.get(text, lambda: tuple(self.encode(text)))

    def start_going(self, texts: tuple[str, ...], partial: str) -> tuple[int, ...]:
        """The tokens that go on with a call start (`texts`: the starts) after `partial`, a proper prefix
        of one (spaces before it aside): the text they make is still a prefix of a start, or holds one
        whole. Found once per starts and prefix (a scan of the vocabulary)."""
        def find() -> tuple[int, ...]:
            p = partial.lstrip(" ")
            rests = [s.lstrip(" ")[len(p):] for s in texts if s.lstrip(" ").startswith(p)]
            if not p:  # nothing but spaces yet: more spaces go on too
                rests.append(" ")
            return tuple(t for t, x in enumerate(self.texts)
                         if x and any(r.startswith(x) or x.startswith(r) for r in rests if r))
        return self._going.get((texts, partial), find)

    def marks(self, firsts: str) -> bytearray:
        """For each token id, 1 where its text holds one of `firsts` (a call start can only begin
        in such a token), then a 0 for the placeholder id -1."""
        return self._marks.get(firsts, lambda: start_marks(self.texts, firsts))

    @cached_property
    def by_text(self) -> tuple[list[str], list[int]]:
        """Every token's text, sorted, and the token ids in that order: the tokens whose text starts
        with a given text are one slice (toolbridge.steer.ending)."""
        order = sorted(range(self.size), key=self.texts.__getitem__)
        return [self.texts[t] for t in order], order

    def ending(self, follow: Follow | None) -> Ending | None:
        """What may follow a complete call (toolbridge.steer.ending), in this vocabulary's tokens; kept per
        Follow (a dialect's closing markup and a tool set's triggers)."""
        if follow is None:
            return None
        return self._endings.get(follow, lambda: Ending.build(follow, self.texts, self.by_text, self.gaps))

    @cached_property
    def gaps(self) -> tuple[int, ...]:
        """The tokens whose text is separating text only (toolbridge.steer.ending.gap_tokens), found once."""
        return gap_tokens(self.texts)

    @cached_property
    def going_on(self) -> dict[str, tuple[int, ...]]:
        """For each point where the argument close decides (toolbridge.steer.callguard.POINTS), the tokens
        that go on to another argument there: an engine decides the close from these on its device."""
        return {p: goes_on(self.texts, p) for p in POINTS}

    @cached_property
    def ending_at(self) -> dict[str, tuple[int, ...]]:
        """For each point where the argument close decides, the enders that end the arguments there
        (the tokens the close bias goes to)."""
        return {p: ending_at(self.enders, p) for p in POINTS}


def hf_vocabulary(tokenizer: Any) -> Vocabulary:
    """The view of a Hugging Face style tokenizer (`encode(text, add_special_tokens=False)`,
    `decode([id])`, `len()`: vLLM's), kept on the tokenizer object: it lives as long as the
    tokenizer, and is found again without building a key."""
    kept = getattr(tokenizer, "__dict__", {})  # a tokenizer without one builds its view each time
    vocab = kept.get(_ATTRIBUTE)
    if vocab is not None:
        return vocab

    def join(tokens: list[int]) -> str:
        try:
            return tokenizer.decode(tokens)
        except Exception:  # an id the tokenizer does not know: no text
            return ""

    key = ("hf", type(tokenizer).__name__, getattr(tokenizer, "name_or_path", None), len(tokenizer))
    vocab = Vocabulary(key, lambda t: tokenizer.encode(t, add_special_tokens=False), lambda t: join([t]),
                       len(tokenizer), join)
    kept[_ATTRIBUTE] = vocab
    return vocab


_ATTRIBUTE = "_toolbridge_vocabulary"
