"""vLLM reasoning parser `toolbridge`: thinking written in plain text, for a template whose generation
prompt opens `<think>` where the tokenizer has no special token for it (vLLM's own parsers refuse to
start there). `--reasoning-parser toolbridge`; the plugin registers it, or load this file with
`--reasoning-parser-plugin`.

The split is the core's (toolbridge.parsing.thinking.ThinkingSplit): the thinking goes to the answer's
`reasoning`, the rest to the tool parser, streamed or not, for any split into deltas. Where the prompt
does not leave a block open, the answer is the model's whole text, as without a reasoning parser (a
model that opens `<think>` itself under such a template is not split on vLLM: its engine decides where
structured output starts from the prompt alone).
vLLM asks the parser in two places:
- the API server, per answer: with the prompt's tokens (`adjust_initial_state_from_prompt` when
  streaming; `take_prompt` through vLLM's parser otherwise, `forward_prompt`), then the text;
- the engine, for structured output: whether the prompt's tokens leave the block open, then at each
  step whether the new tokens complete the close marker. A forced call's grammar starts there.
"""
from __future__ import annotations

from typing import Any, Sequence

from toolbridge.engine import (ANSWER, DEFAULT_THINKING, PROMPT_TAIL, Content, Event, PlainText, Reasoning,
                               ThinkingEnd, ThinkingSplit, opened_by)

try:
    from vllm.reasoning import ReasoningParser, ReasoningParserManager
except ImportError:  # pragma: no cover - releases before the reasoning package
    from vllm.reasoning.abs_reasoning_parsers import ReasoningParser, ReasoningParserManager  # type: ignore
try:
    from vllm.entrypoints.generate.base.protocol import DeltaMessage
except ImportError:
    from vllm.entrypoints.openai.protocol import DeltaMessage  # type: ignore

NAME = "toolbridge"
# How many tokens before a step's new ones are read for a close marker they complete.
CLOSE_TAIL = 16


class ToolbridgeReasoningParser(ReasoningParser):
    """Plain-text thinking at the answer's start -> `reasoning`; the rest is the answer."""

    engine_based_streaming = True  # the text the split holds back comes out through finish_streaming

    def __init__(self, tokenizer: Any, *args: Any, **kwargs: Any):
        super().__init__(tokenizer, *args, **kwargs)
        self.thinking = DEFAULT_THINKING
        self._opened = False  # the prompt left a thinking block open
        self._split: ThinkingSplit | None = None  # the streamed answer's split, once it started

    @property
    def reasoning_start_str(self) -> str:
        return self.thinking.open

    @property
    def reasoning_end_str(self) -> str:
        return self.thinking.close

    def _text(self, ids: Sequence[int]) -> str:
        return self.model_tokenizer.decode([t for t in ids if t >= 0])

    # -- the prompt ------------------------------------------------------------------------------
    def is_reasoning_end(self, input_ids: Sequence[int]) -> bool:
        """Asked of a prompt's tokens: False where the prompt leaves a thinking block open."""
        return not opened_by(self._text(list(input_ids[-PROMPT_TAIL:])), self.thinking)

    def adjust_initial_state_from_prompt(self, prompt_token_ids: Sequence[int]) -> None:
        self.take_prompt(prompt_token_ids)

    def take_prompt(self, prompt_token_ids: Sequence[int]) -> None:
        """The answer's prompt: whether its text starts inside the thinking."""
        self._opened = not self.is_reasoning_end(prompt_token_ids)

    # -- the engine's steps ---------------------------------------------------------------------
    def is_reasoning_end_streaming(self, input_ids: Sequence[int], delta_ids: Sequence[int]) -> bool:
        """Whether the thinking ends in this step: streamed in the API server, where the split has
        read the step's text; in the engine, where the step's tokens complete the close marker."""
        if self._split is not None:
            return self._answering()
        n = len(delta_ids)
        if not n:
            return False
        window = list(input_ids[-(n + CLOSE_TAIL):])
        close = self.thinking.close
        return close in self._text(window) and close not in self._text(window[:-n])

    def has_engine_confirmed_reasoning_end(self) -> bool:
        return self._split is not None and self._answering()

    def _answering(self) -> bool:
        """The streamed answer has begun: the close marker and the whitespace after it are read (the
        tool parser takes the rest, as a whole answer's text after that whitespace)."""
        return self._split.state == ANSWER and not self._split.trim

    def extract_content_ids(self, input_ids: list[int]) -> list[int]:
        """The tokens after the one that completes the close marker (all of them where none does)."""
        end = self._close_end(input_ids)
        return input_ids if end is None else input_ids[end:]

    def count_reasoning_tokens(self, token_ids: Sequence[int]) -> int:
        if not self._opened:
            return 0
        end = self._close_end(token_ids)
        return len(token_ids) if end is None else end

    def _close_end(self, ids: Sequence[int]) -> int | None:
        """The index after the token that completes the close marker, read a token at a time as the
        logits processor reads it (toolbridge.steer.thinking.ThinkingEnd)."""
        end = ThinkingEnd(self.thinking, (), None)
        return next((k + 1 for k, t in enumerate(ids) if end.feed(self._text([t]))), None)

    # -- the answer -------------------------------------------------------------------------------
    def extract_reasoning(self, model_output: str, request: Any) -> tuple[str | None, str | None]:
        if not self._opened:  # as streamed: vLLM hands the whole text to the tool parser
            return None, model_output
        split = ThinkingSplit(PlainText(), self.thinking, opened=True)
        reasoning, content = _texts(split.feed(model_output) + split.finish())
        return reasoning or None, content or None

    def extract_reasoning_streaming(self, previous_text: str, current_text: str, delta_text: str,
                                    previous_token_ids: Sequence[int], current_token_ids: Sequence[int],
                                    delta_token_ids: Sequence[int]) -> DeltaMessage | None:
        if self._split is None:
            self._split = ThinkingSplit(PlainText(), self.thinking, opened=self._opened)
        return _delta(self._split.feed(delta_text))

    def finish_streaming(self) -> DeltaMessage | None:
        """The end of a stream still inside the thinking: the text the split held back (a possible
        close marker's start) is thinking."""
        return _delta(self._split.finish()) if self._split is not None else None


def _texts(events: list[Event]) -> tuple[str, str]:
    reasoning = "".join(e.text for e in events if type(e) is Reasoning)
    content = "".join(e.text for e in events if type(e) is Content)
    return reasoning, content


def _delta(events: list[Event]) -> DeltaMessage | None:
    reasoning, content = _texts(events)
    if not reasoning and not content:
        return None
    return DeltaMessage(reasoning=reasoning or None, content=content or None)


def forward_prompt() -> bool:
    """vLLM hands each answer's prompt tokens to its parser (`set_prompt_token_ids`), whose reasoning
    half never sees them; pass them on to a reasoning parser that takes them (`take_prompt`), so a
    whole answer is split as a streamed one is. False where this vLLM has no such parser."""
    try:
        from vllm.parser.abstract_parser import DelegatingParser
    except ImportError:
        return False
    base = DelegatingParser.set_prompt_token_ids
    if getattr(base, "forwards_prompt", False):
        return True

    def set_prompt_token_ids(self: Any, prompt_token_ids: Sequence[int]) -> None:
        base(self, prompt_token_ids)
        take = getattr(self.reasoning_parser, "take_prompt", None)
        if take is not None:
            take(prompt_token_ids)

    set_prompt_token_ids.forwards_prompt = True  # type: ignore[attr-defined]
    DelegatingParser.set_prompt_token_ids = set_prompt_token_ids
    return True


def register() -> None:
    """Register the parser under its name and install the seam it needs; idempotent."""
    ReasoningParserManager.register_module(NAME, force=True, module=ToolbridgeReasoningParser)
    forward_prompt()


register()
