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


def to_args(steering: Steering | None, guard: CallGuard | None, thinking: ThinkingEnd | None = None) -> dict:
    """The request arguments that carry `steering`, `guard` and the end of a thinking block the prompt
    may open (`thinking`; any may be None): {} for none."""
    packed: dict[str, Any] = {}
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
    try:
        packed = args.get(ARG) if isinstance(args, Mapping) else None
        if not isinstance(packed, Mapping):
            return None, None
        return _part(Steering.unpack, packed.get("steering")), _part(CallGuard.unpack, packed.get("guard"))
    except Exception:  # a mapping of nobody's making whose get raises
        return None, None


def thinking_from_args(args: Mapping[str, Any] | None) -> ThinkingEnd | None:
    """The thinking end a request's arguments carry (None where there is none or it is malformed)."""
    try:
        packed = args.get(ARG) if isinstance(args, Mapping) else None
        return _part(ThinkingEnd.unpack, packed.get("thinking")) if isinstance(packed, Mapping) else None
    except Exception:  # a mapping of nobody's making whose get raises
        return None


def _part(unpack: Any, data: Any) -> Any:
    try:
        return unpack(data)
    except Exception:  # what unpack does not expect (a number too large for a float): ignored all the same
        return None
