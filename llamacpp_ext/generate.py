"""Token generation in phases over one growing token sequence.

`auto` is lazy: a free phase runs unconstrained and stops at a trigger (any of the core's
entries: toolbridge.constrain.grammar.entries); the trigger is kept, and a grammar phase continues on the same sequence (llama.cpp reuses the
KV cache of the common prefix, so nothing is evaluated twice) until the call's grammar is
complete; then a free phase again, for content or another call. Plain text therefore
costs what it costs without tools. Stop strings, max_tokens and usage are counted here,
across phases.

Each step samples first and checks only the chosen token against the grammar, as llama.cpp's
own server does: the grammar is applied to every candidate only when that token is rejected,
which is rare while the model follows the call's format (llama-cpp-python's `Llama.generate`
applies it to every candidate of every step; docs/llama-cpp.md has the cost). A step with no grammar
and nothing to change in the logits is one llama.cpp call.
"""
from __future__ import annotations

import codecs
import ctypes
import math
import random
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Sequence

import llama_cpp
import numpy as np
from llama_cpp import LlamaGrammar

from toolbridge.engine import AnswerRules, BadRequest, write

from .compat import (GrammarSampler, base_seed, detokenize, grammar_text, input_ids, is_end_of_generation,
                     last_logits, reuse_cache, sample_in_c, sampler_chain)
from .interrupt import Interrupt

_TOKEN_DATA = np.dtype([("id", np.intc), ("logit", np.single), ("p", np.single)], align=True)


@dataclass
class Sampling:
    """The sampling parameters of a request, named as `Llama.generate` takes them."""

    temp: float = 0.2
    top_p: float = 0.95
    top_k: int = 40
    min_p: float = 0.05
    typical_p: float = 1.0
    repeat_penalty: float = 1.1
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    mirostat_mode: int = 0
    mirostat_tau: float = 5.0
    mirostat_eta: float = 0.1
    logit_bias: dict[int, float] = field(default_factory=dict)
    processors: list[Callable[[Any, Any], Any]] = field(default_factory=list)  # in-process callers' own


def logit_bias_ids(llama: llama_cpp.Llama, logit_bias: Any) -> dict[int, float]:
    """The request's logit_bias as token ids and finite numbers (llama.cpp reads the ids as
    indexes into the vocabulary: an id outside it is a bad request, not a crash)."""
    out: dict[int, float] = {}
    for key, value in (logit_bias or {}).items():
        try:
            token, change = int(key), float(value)
        except (TypeError, ValueError):
            raise BadRequest(f"logit_bias maps token ids to numbers; got {key!r}: {value!r}.", param="logit_bias") from None
        if not 0 <= token < llama.n_vocab() or math.isnan(change):
            raise BadRequest(f"logit_bias token id {key!r} is not in the vocabulary (0..{llama.n_vocab() - 1}).",
                             param="logit_bias")
        out[token] = change
    return out


class Sampler:
    """One phase's sampling: the request's sampler chain, and its grammar checked sample-first."""

    def __init__(self, llama: llama_cpp.Llama, sampling: Sampling, seed: int, grammar: LlamaGrammar | None,
                 rules: AnswerRules | None = None):
        self.llama = llama
        self.chain = sampler_chain(llama, sampling, seed, sampling.logit_bias)
        self.grammar = GrammarSampler(llama, *grammar_text(grammar)) if grammar is not None else None
        self.processors = sampling.processors
        self.rules = rules  # the answer's per-token rules (toolbridge.steer.rules), read by the session
        self.buf: np.ndarray | None = None
        self.unbiased_at = -1  # a position sampled again without the call starts' bias (Session.phase)
        self.chose_start = False  # the last token is a call start's first token the bias chose

    def replay(self, tokens: Sequence[int]) -> None:
        """Tell the chain the phase's tokens so far (a fresh sampler taking over a phase: its
        penalties count them)."""
        for token in tokens:
            llama_cpp.llama_sampler_accept(self.chain.sampler, token)

    def close(self) -> None:
        if self.grammar is not None:
            self.grammar.close()
        self.chain.close()

    def next(self, tokens: list[int]) -> int:
        """The next token after `tokens` (all evaluated), accepted by the chain and the grammar."""
        rules = self.rules
        changes, only = rules.next(self._top_text, unbiased=len(tokens) == self.unbiased_at) if rules else ([], None)
        self.chose_start = False
        if self.grammar is None and not changes and only is None and not self.processors:
            return sample_in_c(self.llama, self.chain)
        logits = last_logits(self.llama)
        if changes or only is not None or self.processors:
            logits = logits.copy()
            write(logits[None, :], [(0, changes, only)], np.asarray)
            for f in self.processors:
                logits = f(input_ids(self.llama), logits)
        token = self._pick(logits, grammar_first=False)
        if self.grammar is not None and not self._allowed(token, logits):
            token = self._pick(logits, grammar_first=True)
            if not self._allowed(token, logits):  # the rules left the grammar nothing
                token = self._grammar_top(last_logits(self.llama))
        if changes:
            self.chose_start = rules.chose(token, lambda: int(np.argmax(last_logits(self.llama))))
        llama_cpp.llama_sampler_accept(self.chain.sampler, token)
        if self.grammar is not None:
            llama_cpp.llama_sampler_accept(self.grammar.ptr, token)
        return token

    def _top_text(self) -> str:
        """The text of the model's highest-ranked next token, before any change (the guard asks)."""
        return self.rules.vocab.text(int(np.argmax(last_logits(self.llama))))

    def _candidates(self, logits: np.ndarray) -> Any:
        """Every token with its logit, as llama.cpp's samplers take them (in one buffer, reused)."""
        if self.buf is None:
            self.buf = np.zeros(len(logits), dtype=_TOKEN_DATA)
            self.ids = np.arange(len(logits), dtype=np.intc)
        buf = self.buf
        buf["id"] = self.ids
        buf["logit"] = logits
        buf["p"] = 0.0
        return llama_cpp.llama_token_data_array(buf.ctypes.data_as(llama_cpp.llama_token_data_p), len(buf), -1, False)

    def _pick(self, logits: np.ndarray, grammar_first: bool) -> int:
        """Apply the chain (after the grammar, if asked) to every candidate; the chosen token."""
        arr = self._candidates(logits)
        if grammar_first:
            llama_cpp.llama_sampler_apply(self.grammar.ptr, ctypes.byref(arr))
        llama_cpp.llama_sampler_apply(self.chain.sampler, ctypes.byref(arr))
        return int(arr.data[arr.selected].id)

    def _grammar_top(self, logits: np.ndarray) -> int:
        """The model's top token among those the grammar allows, no other rule applied: where the
        rules (steering, the call guard, logit_bias) forbid every token the grammar allows, the
        grammar wins, since accepting a token it rejects aborts llama.cpp."""
        arr = self._candidates(logits)
        llama_cpp.llama_sampler_apply(self.grammar.ptr, ctypes.byref(arr))
        return int(self.buf["id"][int(np.argmax(self.buf["logit"]))])

    def _allowed(self, token: int, logits: np.ndarray) -> bool:
        """Whether the grammar lets `token` through next (it sets a rejected logit to -inf)."""
        one = (llama_cpp.llama_token_data * 1)(llama_cpp.llama_token_data(token, float(logits[token]), 0.0))
        arr = llama_cpp.llama_token_data_array(one, 1, -1, False)
        llama_cpp.llama_sampler_apply(self.grammar.ptr, ctypes.byref(arr))
        return not math.isinf(one[0].logit)


# tokens of a prompt evaluated between two looks at the interrupt: on a CPU, prompt evaluation is
# as fast in steps of 64 as of 512 (docs/measurements.md), and a step takes a fraction of a second
EVAL_STEP = 64

# How a phase ended (LIMIT: the phase's own token limit).
EOG, STOP, LENGTH, TRIGGER, LIMIT = "eog", "stop", "length", "trigger", "limit"


class Session:
    """One answer: the prompt, then everything generated or inserted, as one token list."""

    def __init__(self, llama: llama_cpp.Llama, prompt_text: str, prompt_tokens: Sequence[int], sampling: Sampling,
                 *, seed: int | None, max_tokens: int | None, stop: Sequence[str], rules: AnswerRules | None = None,
                 interrupt: Interrupt | None = None):
        self.llama = llama
        self.interrupt = interrupt  # checked before each evaluation: the answer ends when it is set
        self.prompt_text = prompt_text
        self.tokens = list(prompt_tokens)
        self.n_prompt = len(self.tokens)
        self.rules = rules  # the answer's per-token rules (toolbridge.steer.rules): this loop drives them
        self.sampling = sampling
        n_ctx = llama.n_ctx()
        self.max_tokens = n_ctx - self.n_prompt if not max_tokens or max_tokens <= 0 else max_tokens
        self.stop = [s for s in dict.fromkeys(stop) if s]
        self.seed = seed if seed is not None else random.Random(base_seed(llama)).randint(0, 2**32)
        self.completion_tokens = 0
        self.text = ""  # all text kept so far
        self.start = self.n_prompt  # where the answer starts: after the prompt, or after the thinking
        self.text_start = 0  # the same, in `text`
        self.phases = 0
        self.ended = ""
        self.trigger: str | None = None  # the trigger the last phase ended at

    def again(self, rules: AnswerRules) -> Iterator[str]:
        """The answer generated anew from its start (after the prompt, and the thinking), under other
        `rules` (its first call made its values up: the answer in text, ToolRequest.in_text). What was
        generated before still counts in usage and against max_tokens."""
        self.tokens = self.tokens[:self.start]
        self.text = self.text[:self.text_start]
        self.rules = rules
        return self.phase()

    @property
    def budget(self) -> int:
        return min(self.max_tokens - self.completion_tokens, self.llama.n_ctx() - len(self.tokens))

    def prefill(self) -> None:
        """Evaluate the prompt (what the KV cache does not already hold), so that a stream's
        first chunk goes out when generation starts, not before a long prompt evaluation."""
        self.evaluate(reuse_cache(self.llama, self.tokens))

    def evaluate(self, tokens: list[int]) -> None:
        """Evaluate `tokens` EVAL_STEP at a time (Llama.eval batches them the same way within its
        n_batch), checking the interrupt before each step: a long prompt whose client left is not
        evaluated to its end."""
        step = max(1, min(self.llama.n_batch, EVAL_STEP))
        for i in range(0, len(tokens), step):
            if self.interrupt is not None:
                self.interrupt.check(self.completion_tokens)
            self.llama.eval(tokens[i:i + step])

    def think(self, close: str) -> Iterator[str]:
        """The thinking the prompt opened, up to its `close` marker, with no trigger of a call; where the
        answer must call, the rules hold back the end of the answer inside it. At the rules' budget the
        marker is written for the model whole (the tokens the rules would hold it to, evaluated at once).
        The answer starts after the marker."""
        thinking = self.rules.thinking if self.rules is not None else None
        yield from self.phase(triggers={close: False}, limit=thinking.budget if thinking is not None else None)
        if self.ended == LIMIT:
            yield from self.write(close)
            self.ended = TRIGGER
        if self.ended == TRIGGER:
            self.start, self.text_start = len(self.tokens), len(self.text)
            if self.rules is not None:
                self.rules.answer_starts()

    def write(self, text: str) -> Iterator[str]:
        """`text` written into the answer as if generated (counted as completion tokens)."""
        tokens = self.llama.tokenize(text.encode("utf-8"), add_bos=False, special=False)
        self.tokens += tokens
        self.completion_tokens += len(tokens)
        self.text += text
        yield text

    def phase(self, grammar: LlamaGrammar | None = None, triggers: Mapping[str, bool] | None = None,
              stop: Sequence[str] = (), limit: int | None = None) -> Iterator[str]:
        """Generate until end of generation, a stop string, the budget, `limit` tokens of this phase
        (ended LIMIT), or one of `triggers` (text -> whether it counts only at a line's start); yield
        the text as it becomes final (never a possible start of a stop string or trigger; `stop` adds
        stop strings for this phase). Sets `ended` (and `trigger`, the one found). On a trigger, the
        text up to and including it is kept and the token list is cut to match, ready for the next phase."""
        triggers = triggers or {}
        self.trigger = None
        if self.budget <= 0:
            self.ended = LENGTH
            return
        llama = self.llama
        sampler = Sampler(llama, self.sampling, (self.seed + self.phases) % 2**32, grammar, self.rules)
        self.phases += 1
        watch = Watch(self.stop + [s for s in stop if s and s not in self.stop], triggers)
        start = len(self.tokens)
        ends: list[int] = []  # byte length of this phase's pieces after each token
        nbytes = 0
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        kept: list[str] = []  # text of this phase already yielded
        pending = ""
        self.ended = LENGTH
        todo = reuse_cache(llama, self.tokens)
        mark: _Mark | None = None  # where a call start the bias chose began, while it may still be one
        try:
            while True:
                if todo:
                    self.evaluate(todo)
                elif self.interrupt is not None:
                    self.interrupt.check(self.completion_tokens)
                token = sampler.next(self.tokens)
                if sampler.chose_start:
                    mark = _Mark(len(self.tokens), pending, nbytes, len(ends), decoder.getstate(), self.rules.mark())
                if is_end_of_generation(llama, token):
                    if mark is not None:  # ended inside the bias's start: taken back, sampled again
                        sampler, todo, pending, nbytes = self._take_back(mark, sampler, grammar, start, ends, decoder)
                        mark = None
                        continue
                    self.ended = EOG
                    break
                piece = detokenize(llama, (token,))
                self.tokens.append(token)
                self.completion_tokens += 1
                nbytes += len(piece)
                ends.append(nbytes)
                text = decoder.decode(piece)
                pending += text
                if self.rules is not None:
                    self.rules.read((token,), text)
                if mark is not None:
                    stands = self.rules.start_stands(pending[len(mark.pending):])
                    if stands is False:  # the model did not go on with the bias's start: taken back
                        sampler, todo, pending, nbytes = self._take_back(mark, sampler, grammar, start, ends, decoder)
                        mark = None
                        continue
                    if stands:
                        mark = None
                hit = watch.find(pending, lambda at: self._at_line_start(pending, at, kept))
                if hit is not None:
                    at, found = hit
                    if pending[:at]:
                        kept.append(pending[:at])
                        yield pending[:at]
                    pending = ""
                    if found in triggers:
                        kept.append(found)
                        yield found
                        self.ended, self.trigger = TRIGGER, found
                    else:
                        self.ended = STOP
                    break
                hold = watch.held(pending)
                if mark is None and len(pending) > hold:
                    out = pending[:len(pending) - hold]
                    pending = pending[len(pending) - hold:]
                    kept.append(out)
                    yield out
                if self.budget <= 0:
                    if mark is not None:  # cut inside the bias's start: it leaves no trace
                        pending, nbytes = self._restore(mark, ends, decoder)
                    break
                if limit is not None and len(self.tokens) - start >= limit:
                    self.ended = LIMIT
                    break
                todo = [token]
        finally:
            sampler.close()
        if self.ended != TRIGGER:
            pending += decoder.decode(b"", final=True)
            if pending and self.ended != STOP:
                kept.append(pending)
                yield pending
        phase_text = "".join(kept)
        self.text += phase_text
        if self.ended == TRIGGER:
            self._align(start, ends, phase_text)

    def _take_back(self, mark: "_Mark", sampler: Sampler, grammar: LlamaGrammar | None, start: int, ends: list[int],
                   decoder: Any) -> tuple[Sampler, list[int], str, int]:
        """Take back a call start the bias chose and what followed it (the model went on with
        something else): the tokens, the text held, the guard's reading and the decoder as they were
        at `mark`; a fresh sampler for the phase, told the tokens before it, that samples the mark's
        position without the call starts' bias. What was generated still counts in usage. Returns
        the sampler, the tokens to evaluate (the cache's replay), the text held and its byte count."""
        pending, nbytes = self._restore(mark, ends, decoder)
        sampler.close()
        fresh = Sampler(self.llama, self.sampling, (self.seed + self.phases - 1) % 2**32, grammar, self.rules)
        fresh.replay(self.tokens[start:])
        fresh.unbiased_at = mark.at
        return fresh, reuse_cache(self.llama, self.tokens), pending, nbytes

    def _restore(self, mark: "_Mark", ends: list[int], decoder: Any) -> tuple[str, int]:
        """The phase as it was at `mark`: the token list, the rules' reading, the byte ends and the
        decoder; returns the text held then and its byte count."""
        self.tokens = self.tokens[:mark.at]
        self.rules.restore(mark.rules)
        del ends[mark.ends:]
        decoder.setstate(mark.decoder)
        return mark.pending, mark.nbytes

    def _at_line_start(self, pending: str, at: int, kept: list[str]) -> bool:
        before = (self.text + "".join(kept) + pending[:at]).rstrip(" \t")
        return not before or before.endswith("\n")

    def _align(self, start: int, ends: list[int], phase_text: str) -> None:
        """Cut the token list to exactly the kept text: whole tokens inside it, then the
        rest (a token that ran past the trigger) tokenized anew."""
        llama = self.llama
        want = phase_text.encode("utf-8")
        k = 0
        while k < len(ends) and ends[k] <= len(want):
            k += 1
        done = ends[k - 1] if k else 0
        rest = want[done:]
        tail = llama.tokenize(rest, add_bos=False, special=False) if rest else []
        if detokenize(llama, tail) == rest:
            self.tokens = self.tokens[:start + k] + tail
        else:  # tokenizers that prefix a space (SentencePiece): tokenize all the text instead
            self.tokens = llama.tokenize((self.prompt_text + self.text).encode("utf-8"), add_bos=False, special=True)
        if self.rules is not None:
            self.rules.retokenized(self.tokens[self.start:])


@dataclass(frozen=True)
class _Mark:
    """A phase's state where a call start the bias chose began (Session.phase takes it back there)."""

    at: int  # its index in the token list
    pending: str  # the text held before it
    nbytes: int
    ends: int  # len(ends) before it
    decoder: Any  # the UTF-8 decoder's state
    rules: AnswerRules  # the rules' reading before it


class Watch:
    """The texts a phase watches for: stop strings, and triggers (some only at a line's start).
    An agent's 128 tools make 129 triggers, so what may still become one is looked up in a set
    of their prefixes (O(longest) per token, not O(count))."""

    def __init__(self, stop: Sequence[str], triggers: Mapping[str, bool]):
        self.texts = list(dict.fromkeys([*stop, *triggers]))
        self.line_start = {t for t, at_line_start in triggers.items() if at_line_start}
        self.prefixes = {w[:k] for w in self.texts for k in range(1, len(w))}
        self.longest = max((len(w) for w in self.texts), default=0)

    def find(self, pending: str, at_line_start: Callable[[int], bool]) -> tuple[int, str] | None:
        """The first watched text in `pending` (the longer one where two start together)."""
        best: tuple[int, str] | None = None
        for w in self.texts:
            at = pending.find(w)
            while at >= 0 and w in self.line_start and not at_line_start(at):
                at = pending.find(w, at + 1)
            if at >= 0 and (best is None or at < best[0] or (at == best[0] and len(w) > len(best[1]))):
                best = (at, w)
        return best

    def held(self, pending: str) -> int:
        """Length of the longest end of `pending` that may still become a watched text."""
        for k in range(min(self.longest - 1, len(pending)), 0, -1):
            if pending[-k:] in self.prefixes:
                return k
        return 0
