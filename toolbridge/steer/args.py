"""The one per-request argument that carries a request's steering (toolbridge.steer.steering) and
its call guard (toolbridge.steer.callguard) to an engine's logits processor: vLLM's
SamplingParams.extra_args, under the key `ARG`, as plain data (lists, numbers, strings, dicts).

One key, not one per setting: the request's other arguments (a client's own, vLLM's) stay apart
from toolbridge's, and a client's argument named like it is dropped or ignored whole. A client can
send it too, so `from_args` reads anything not of toolbridge's making as nothing and never raises:
the processor runs in the engine, for every request of the batch.
"""
from __future__ import annotations

from typing import Any, Mapping

from .callguard import CallGuard
from .steering import Steering
from .thinking import ThinkingEnd

ARG = "toolbridge"


def to_args(steering: Steering | None, guard: CallGuard | None, thinking: ThinkingEnd | None = None,
            banned: tuple[int, ...] = ()) -> dict:
    """The request arguments that carry `steering`, `guard`, the end of a thinking block the prompt
    may open (`thinking`; any may be None) and the tokens banned at every step of the answer
    (`banned`): {} for none."""
    packed: dict[str, Any] = {}
    if banned:
        packed["banned"] = list(banned)
    if steering is not None:
        packed["steering"] = steering.pack()
    if guard is not None:
        packed["guard"] = guard.pack()
    if thinking is not None:
        packed["thinking"] = thinking.pack()
    return {ARG: packed} if packed else {}


def from_args(args: Mapping[str, Any] | None) -> tuple[Steering | None, CallGuard | None]:
    """The steering and the (new) guard a request's arguments carry, each None where there is none,
    it is turned off, or it is malformed."""
    return _part(args, "steering", Steering.unpack), _part(args, "guard", CallGuard.unpack)


def thinking_from_args(args: Mapping[str, Any] | None) -> ThinkingEnd | None:
    """The thinking end a request's arguments carry (None where there is none or it is malformed)."""
    return _part(args, "thinking", ThinkingEnd.unpack)


def banned_from_args(args: Mapping[str, Any] | None) -> tuple[int, ...]:
    """The tokens a request's arguments ban at every step of the answer (none where malformed)."""
    return _part(args, "banned", _tokens) or ()


def _tokens(data: Any) -> tuple[int, ...] | None:
    if not isinstance(data, list) or not all(type(t) is int and t >= 0 for t in data):
        return None
    return tuple(data)


def _part(args: Any, key: str, unpack: Any) -> Any:
    """One packed part of toolbridge's argument, unpacked; None for anything not of toolbridge's making
    (a mapping whose get raises, a number too large for a float): ignored all the same."""
    try:
        packed = args.get(ARG) if isinstance(args, Mapping) else None
        return unpack(packed.get(key)) if isinstance(packed, Mapping) else None
    except Exception:
        return None
