"""ReAct calls: after the `Action:` marker, the tool's name on the rest of the line, then one
of the dialect's input labels (`Action Input:`) and the arguments.

The parser hands the text after the marker to `ReactReader.feed`, which says what it found:
nothing decided yet, a name that is no declared tool (the marker was content after all),
the start of the arguments (the parser reads them as a JSON body), or the end of a call
that has no more input.
"""
from __future__ import annotations

from .calls import CallBook, Slot
from ..dialects import Dialect
from ..lenient import WS

MAX_NAME_LINE = 200  # a longer "name" is prose, not a tool name

# what feed() found
UNDECIDED, NAMED, NOT_A_CALL, INPUT, END = range(5)
# where the reader is
_NAME, _GAP, _INPUT = range(3)


class ReactReader:
    def __init__(self, dialect: Dialect, book: CallBook):
        self.labels = dialect.input_labels
        self.book = book
        self.where = _NAME
        self.name_parts: list[str] = []
        self.slot: Slot | None = None
        self.gap_newline = False

    @property
    def name_text(self) -> str:
        return "".join(self.name_parts)

    def feed(self, s: str, i: int, final: bool) -> tuple[int, int]:
        """Read s[i:]; returns (where it stopped, what it found)."""
        if self.where == _NAME:
            return self._name(s, i, final)
        if self.where == _GAP:
            return self._gap(s, i, final)
        return self._input(s, i)

    def _name(self, s: str, i: int, final: bool) -> tuple[int, int]:
        n = len(s)
        j = s.find("\n", i)
        if j < 0:
            self.name_parts.append(s[i:])
            if not final and sum(map(len, self.name_parts)) <= MAX_NAME_LINE:
                return n, UNDECIDED
            j = n
        else:
            self.name_parts.append(s[i:j])
        line = self.name_text
        tool = self.book.resolve(line) if len(line) <= MAX_NAME_LINE else None
        if tool is None:
            return j, NOT_A_CALL
        self.slot = Slot(self.book, tool)
        self.book.start(self.slot)
        self.where = _GAP
        return j, NAMED

    def _gap(self, s: str, i: int, final: bool) -> tuple[int, int]:
        """Between the name line and the input label."""
        n = len(s)
        while i < n and s[i] in WS:
            i += 1
        if i == n:
            return i, UNDECIDED
        for label in self.labels:
            if s.startswith(label, i):
                self.where = _INPUT
                self.gap_newline = False
                return i + len(label), UNDECIDED
            if not final and label.startswith(s[i:]):
                return i, UNDECIDED
        return i, END

    def _input(self, s: str, i: int) -> tuple[int, int]:
        """After the input label: the arguments, unless a new line starts with something else."""
        n = len(s)
        while i < n and s[i] in WS:
            if s[i] == "\n":
                self.gap_newline = True
            i += 1
        if i == n:
            return i, UNDECIDED
        if self.gap_newline and s[i] not in "{[":
            return i, END
        return i, INPUT

    def end(self, complete: bool) -> None:
        if self.slot is not None:
            self.slot.end(complete)
            self.slot = None


class ReactScanning:
    """The stream parser's part for a ReAct call (toolbridge.parsing.stream.StreamParser): the reader
    above finds the action and its input; the parser's state machine does the rest."""

    def _react(self, s: str, i: int, final: bool) -> int:
        while True:
            j, found = self.react.feed(s, i, final)
            if found == NAMED:  # a call: its marker and name are not content
                self.held = []
                self.ws = ""
                i = j
                continue
            if found == NOT_A_CALL:
                self.held.append(self.react.name_text)
                self._fail()
            elif found == INPUT:
                self._begin_body(self.dialect, slot=self.react.slot)
                self.body.committed = True
            elif found == END:
                self._end_react(complete=True)
            return j

    def _end_react(self, complete: bool) -> None:
        self.react.end(complete)
        self.react = None
        self._to_content()
