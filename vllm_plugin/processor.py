"""toolbridge's per-answer rules (toolbridge.steer.rules.AnswerRules, the object llama.cpp's session
drives too: the thinking, the `auto` call steering, the guard of calls, the end after calls) run for
every row of a batch, as one vLLM batch logits processor.

Installed, it loads through the `vllm.logits_processors` entry point; otherwise pass
`--logits-processors vllm_plugin.processor:RulesProcessor`. Without it, requests still work, unsteered and
unguarded. It touches only requests whose sampling params carry the rules (toolbridge's one
argument, toolbridge.steer.args, set by the tool parser's adjust_request; a malformed one is
ignored). vLLM applies the structured-output mask before logits processors, so a token the
constraint forbids stays at -inf whatever is added here.

Per step it costs what the batch needs, not what it holds:
- a request is kept only while a rule may still speak: steering within its horizon, or a guard;
- an `auto` answer's guard, until a call starts, looks at each new token's id alone: only a token
  whose text may begin a call start (toolbridge.steer.vocab.Vocabulary.marks) is decoded and read, and the
  tokens after it while a start may be forming;
- the rule runs for the requests with steering in its horizon or an armed guard, each reading the
  text of its new token from the vocabulary's table of token texts (no tokenizer call);
- all of the step's changes are written at once by the core's writer (toolbridge.steer.logits.write: one
  indexed add, the holds in one masked select).
Everything is decided on the CPU from the output token ids vLLM hands over (its lists, shared by
reference, which it completes before logits processors run), except the argument close: where a
guard decides on the model's top token (toolbridge.steer.callguard.CallGuard.decides_at), the top is taken
on the logits' device and looked up in the vocabulary's tables of the tokens that go on to another
argument (Vocabulary.going_on), and the close bias is added where it does. On a GPU nothing is read
back: the processor only queues work, and the engine's CPU work keeps overlapping the forward pass.
On the CPU the top token is read directly (there is no device to wait for), the cheaper way there.
"""
from __future__ import annotations

from typing import Any, Sequence

import torch
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor, MoveDirectionality

from toolbridge.engine import ARG, PROMPT_TAIL, AnswerRules, Edit, Vocabulary, hf_vocabulary, write
from vllm_plugin.rows import NEVER, POINT, CloseTables, Row, end_tokens


class RulesProcessor(LogitsProcessor):
    # Where the argument close reads the model's top token: None, on the host where the logits are
    # on the CPU and on their device elsewhere; True or False forces one (the tests hold both alike).
    top_on_host: bool | None = None

    def __init__(self, vllm_config: Any, device: Any, is_pin_memory: bool):
        self._model_config = getattr(vllm_config, "model_config", None)
        self._device = torch.device(device) if device is not None else torch.device("cpu")
        self._pin = bool(is_pin_memory) and self._device.type != "cpu"
        self._answers: dict[int, Row] = {}  # batch row -> its answer, while a rule may speak
        self._thinking: dict[int, Row] = {}  # ... while it thinks (the rules wait for its end)
        self._watch: dict[int, Row] = {}  # ... whose guard waits for a call start
        self._ruled: dict[int, Row] = {}  # ... which the rules may change at the next step
        self._vocab: Vocabulary | None = None
        self._no_text = False  # no tokenizer could be loaded
        self._tables: dict[int, CloseTables] = {}  # the close tables, per logits width

    def is_argmax_invariant(self) -> bool:
        return False

    # -- the model's text -----------------------------------------------------------------------
    def _load_tokenizer(self) -> Any:
        if self._model_config is None:
            return None
        from vllm.tokenizers import cached_tokenizer_from_config

        return cached_tokenizer_from_config(self._model_config)

    def _text_ready(self) -> bool:
        """Whether the model's vocabulary is loaded (the guard reads text), with each token's text
        (the guard reads them from the table, no tokenizer call); loads them once."""
        if self._vocab is None:
            if self._no_text:
                return False
            try:
                tok = self._load_tokenizer()
            except Exception:  # no tokenizer (the server runs without one): requests go unguarded
                tok = None
            if tok is None:
                self._no_text = True
                return False
            self._vocab = hf_vocabulary(tok)
            self._vocab.texts  # noqa: B018 (decoded once, here, not at a request's first step)
        return True

    # -- the batch --------------------------------------------------------------------------------
    def _new_answer(self, params: Any, prompt_ids: Sequence[int] | None, output_ids: list[int]) -> Row | None:
        # toolbridge's one argument (toolbridge.steer.args); one of nobody's making is ignored, never raises
        args = getattr(params, "extra_args", None)
        if not isinstance(args, dict) or ARG not in args:
            return None
        vocab = self._vocab if self._text_ready() else None
        rules = AnswerRules.unpack(args, vocab, end_tokens(params), lambda: vocab.join(
            [t for t in (prompt_ids or ())[-PROMPT_TAIL:] if t >= 0]))
        return Row(output_ids, rules) if rules is not None and not rules.done else None

    def _place(self, row: int, a: Row) -> None:
        """Enter an answer in the tables of what the rules do with it at the next step."""
        rules = a.rules
        if rules.thinking is not None:
            self._thinking[row] = a
            return
        if rules.watching:
            self._watch[row] = a
        if rules.ruled:
            self._ruled[row] = a

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        """Follow the batch's rows: removed, then added (an added row replaces what was there),
        then moved (one way, or swapped)."""
        if not batch_update:
            return
        tables = (self._answers, self._watch, self._ruled, self._thinking)
        if self._answers:
            for row in batch_update.removed:
                for table in tables:
                    table.pop(row, None)
        for row, params, prompt_ids, output_ids in batch_update.added:
            for table in tables:
                table.pop(row, None)
            a = self._new_answer(params, prompt_ids, output_ids)
            if a is not None:
                self._answers[row] = a
                self._place(row, a)
        if self._answers:
            for i, j, direction in batch_update.moved:
                for table in tables:
                    a, b = table.pop(i, None), table.pop(j, None)
                    if a is not None:
                        table[j] = a
                    if b is not None and direction == MoveDirectionality.SWAP:
                        table[i] = b

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        if not self._answers:
            return logits
        edits: list[Edit] = []
        if self._thinking:
            self._think(edits)
        if self._watch:
            self._look()
        ruled = self._ruled
        if not ruled:
            if edits:
                write(logits, edits, self._tensor)
            return logits
        vocab = self._vocab
        asks: list[tuple[int, str]] = []  # rows whose guard decides on the model's top token, and where
        silent: list[int] = []
        for row, a in ruled.items():
            a.catch_up()
            rules = a.rules
            if not rules.ruled:  # no call started, and steering has no more to say
                silent.append(row)
                continue
            at = rules.decides_at
            if at is not None:
                asks.append((row, at))
                continue
            changes, only = rules.next()
            if changes or only is not None:
                edits.append((row, changes, only))
        for row in silent:
            if ruled.pop(row).rules.done:
                del self._answers[row]
        if asks:
            asks.sort()
            on_host = self.top_on_host if self.top_on_host is not None else logits.device.type == "cpu"
            if on_host:
                rows = [row for row, _ in asks]
                for row, top in zip(rows, self._top(logits, rows)):
                    changes, only = ruled[row].rules.next(lambda top=top: vocab.text(top))
                    if changes or only is not None:
                        edits.append((row, changes, only))
            else:
                self._close_on_device(logits, asks, edits)
        if edits:
            write(logits, edits, self._tensor)
        return logits

    def _think(self, edits: list[Edit]) -> None:
        """Answers inside the thinking their prompt opened: past the budget, held to the close marker's
        next token; where the answer must call, no end. Where the thinking ends, the answer starts at
        the next token, and the other rules take it from there."""
        ended: list[int] = []
        for row, a in self._thinking.items():
            a.catch_up()
            if a.rules.thinking is None:
                ended.append(row)
                continue
            changes, only = a.rules.next()
            if changes or only is not None:
                edits.append((row, changes, only))
        for row in ended:
            a = self._thinking.pop(row)
            if a.rules.done:
                del self._answers[row]
            else:
                self._place(row, a)

    def _look(self) -> None:
        """`auto` answers before their first call: the rules read each new token (its text only where it
        may begin a call start, or one may be forming); an answer whose call started goes to the rules."""
        armed: list[int] = []
        for row, a in self._watch.items():
            ids = a.ids
            if len(ids) != a.read:
                rules = a.rules
                a.read = rules.catch_up(ids, a.read)
                if rules.guard.armed:
                    armed.append(row)
        for row in armed:  # a call started: the guard speaks from this step on
            self._ruled[row] = self._watch.pop(row)

    def _tensor(self, data: Sequence, dtype: torch.dtype = torch.long) -> torch.Tensor:
        t = torch.tensor(data, dtype=dtype, pin_memory=self._pin)
        return t if self._device.type == "cpu" else t.to(self._device, non_blocking=True)

    def _close_on_device(self, logits: torch.Tensor, asks: list[tuple[int, str]], edits: list[Edit]) -> None:
        """The rule's changes for the rows whose guard decides on the top token (`asks`, ascending),
        with the argument close decided on the logits' device: each row's other changes go to `edits`;
        its top token is taken on the device, looked up in the table of the tokens that go on from its
        decision point, and the close bias is added to the tokens that end the arguments there where
        it goes on (0 elsewhere). Nothing is read back. A token that also has another change this step
        (rare) gets both in one add, where(goes on, both, the other), as the host's sum."""
        vocab, ruled = self._vocab, self._ruled
        width = logits.shape[-1]
        tables = self._tables.get(width)
        if tables is None:
            tables = self._tables[width] = CloseTables(vocab, width, self._device, self._pin)
        rows: list[int] = []  # the rows the close may change
        offsets: list[int] = []  # ... where their point's row of `going` starts (NEVER: the merged adds)
        points: list[int] = []  # ... their row of `tokens`
        biases: list[float] = []
        merged: list[tuple[int, int, int, float, float]] = []  # (of rows, going offset, token, add if on, if not)
        for row, at in asks:
            rules = ruled[row].rules
            guard = rules.guard
            changes, only = rules.next()
            k = POINT[at]
            ends = tables.ends[k]
            if ends:  # else the close has nothing to add here
                if changes and not ends.isdisjoint(t for t, _ in changes):
                    other: dict[int, float] = {}
                    for t, c in changes:
                        if t in ends:
                            other[t] = other.get(t, 0.0) + c
                    changes = [(t, c) for t, c in changes if t not in ends]
                    merged += [(len(rows), k * width, t, other.get(t, 0.0) + guard.close_bias, other.get(t, 0.0))
                               for t in ends]
                    offsets.append(NEVER * width)
                else:
                    offsets.append(k * width)
                rows.append(row)
                points.append(k)
                biases.append(guard.close_bias)
            if changes or only is not None:
                edits.append((row, changes, only))
        if not rows:
            return
        n = len(rows)
        at_rows, at_offsets, at_points = self._tensor(rows + offsets + points).view(3, n)
        top = self._top_on_device(logits, rows, at_rows)
        goes_on = tables.going.index_select(0, top + at_offsets)
        b = biases[0]
        bias = b if biases.count(b) == n else self._tensor(biases, logits.dtype).unsqueeze(1)
        adds = torch.where(goes_on.unsqueeze(1), bias, 0.0)  # where, not a product: 0 * inf
        if adds.dtype != logits.dtype:
            adds = adds.to(logits.dtype)
        logits[at_rows.unsqueeze(1), tables.tokens.index_select(0, at_points)] += adds  # padding: alike, twice
        if merged:
            which, offset, tokens, if_on, if_not = zip(*merged)
            at_which, at_offset, at_tokens = self._tensor(which + offset + tokens).view(3, len(merged))
            logits[at_rows.index_select(0, at_which), at_tokens] += torch.where(
                tables.going.index_select(0, top.index_select(0, at_which) + at_offset),
                self._tensor(if_on, logits.dtype), self._tensor(if_not, logits.dtype))

    @staticmethod
    def _top_on_device(logits: torch.Tensor, rows: list[int], at: torch.Tensor) -> torch.Tensor:
        """The highest-ranked token of each of `rows` (ascending; `at`: them on the device), left on
        the device: one argmax over the rows' span where they fill half of it at least, else over
        the rows gathered."""
        lo, hi = rows[0], rows[-1] + 1
        if hi - lo == len(rows):
            return logits[lo:hi].argmax(dim=-1)
        if 2 * len(rows) >= hi - lo:
            return logits[lo:hi].argmax(dim=-1).index_select(0, at - lo)
        return logits.index_select(0, at).argmax(dim=-1)

    def _top(self, logits: torch.Tensor, rows: list[int]) -> list[int]:
        """The highest-ranked token of each of `rows` (ascending), read back in one transfer (CPU
        logits: nothing to wait for; elsewhere `_close_on_device` reads nothing): one
        argmax over the rows' span where they fill half of it at least (a view, nothing copied),
        else over the rows gathered."""
        lo, hi = rows[0], rows[-1] + 1
        if hi - lo == 1:
            return [int(logits[lo].argmax())]
        if 2 * len(rows) >= hi - lo:
            best = logits[lo:hi].argmax(dim=-1).tolist()
            return [best[r - lo] for r in rows]
        return logits.index_select(0, self._tensor(rows)).argmax(dim=-1).tolist()


__all__ = ["RulesProcessor"]
