"""OpenAI Responses stream events (`POST /v1/responses` with `stream: true`), written from chat
stream chunks (the chat answer as every server streams it)."""
from __future__ import annotations

from typing import Any, Mapping

from .fields import new_id
from .. import custom
from ..deltas import REASONING_FIELD
from .responses import call_item, call_names, message_item, reasoning_item, response_object


class ResponseStream:
    """Chat stream chunks in, Responses stream events out (each a dict with `type` and
    `sequence_number`), in OpenAI's order: created, in_progress, per output item added /
    deltas / done, then completed (or incomplete when cut off by max_output_tokens)."""

    def __init__(self, body: Mapping[str, Any], response_id: str | None = None):
        self.body = body
        self.id = response_id or new_id("resp")
        self.seq = 0
        self.model: Any = body.get("model")
        self.output: list[dict] = []
        self.open: dict | None = None  # the item being streamed
        self.calls: dict[int, dict] = {}  # chat tool-call index -> its item
        self.names = call_names(body.get("tools"))
        self.finish: str | None = None
        self.usage: Any = None
        self.started = False
        self.final: dict | None = None

    def _event(self, kind: str, **fields: Any) -> dict:
        event = {"type": kind, "sequence_number": self.seq, **fields}
        self.seq += 1
        return event

    def _snapshot(self, status: str) -> dict:
        return response_object(self.body, self.id, self.model, [_public(i) for i in self.output], self.finish, self.usage,
                         status=status)

    def start(self) -> list[dict]:
        if self.started:
            return []
        self.started = True
        return [self._event("response.created", response=self._snapshot("in_progress")),
                self._event("response.in_progress", response=self._snapshot("in_progress"))]

    def feed(self, chunk: Mapping[str, Any]) -> list[dict]:
        """Events for one chat completion chunk."""
        events = self.start()
        self.model = chunk.get("model") or self.model
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        for ch in chunk.get("choices") or ():
            d = ch.get("delta") or {}
            if d.get(REASONING_FIELD):
                events += self._reasoning(d[REASONING_FIELD])
            if d.get("content"):
                events += self._text(d["content"])
            for tc in d.get("tool_calls") or ():
                events += self._call(tc)
            if ch.get("finish_reason"):
                self.finish = ch["finish_reason"]
        return events

    def _text(self, text: str) -> list[dict]:
        events = []
        if self.open is None or self.open["type"] != "message":
            events += self._close()
            item = message_item(new_id("msg"), "", "in_progress")
            events += self._add(item)
            events.append(self._event("response.content_part.added", item_id=item["id"],
                                      output_index=len(self.output) - 1, content_index=0,
                                      part={"type": "output_text", "text": "", "annotations": []}))
            item["_text"] = ""
        item = self.open
        item["_text"] += text
        events.append(self._event("response.output_text.delta", item_id=item["id"], output_index=len(self.output) - 1,
                                  content_index=0, delta=text, logprobs=[]))
        return events

    def _reasoning(self, text: str) -> list[dict]:
        events = []
        if self.open is None or self.open["type"] != "reasoning":
            events += self._close()
            item = reasoning_item(new_id("rs"), "", "in_progress")
            events += self._add(item)
            item["_text"] = ""
        item = self.open
        item["_text"] += text
        events.append(self._event("response.reasoning_text.delta", item_id=item["id"], output_index=len(self.output) - 1,
                                  content_index=0, delta=text))
        return events

    def _call(self, tc: Mapping[str, Any]) -> list[dict]:
        events = []
        index = tc.get("index", 0)
        fn = tc.get("function") or {}
        item = self.calls.get(index)
        if item is None:
            events += self._close()
            item = call_item(tc.get("id") or "", fn.get("name") or "", "", "in_progress", self.names)
            item["_arguments"] = ""
            self.calls[index] = item
            events += self._add(item)
        if fn.get("arguments"):
            item["_arguments"] += fn["arguments"]
            if item["type"] == "function_call":  # a custom tool's input is known once its call ends
                item["arguments"] = item["_arguments"]
                events.append(self._event("response.function_call_arguments.delta", item_id=item["id"],
                                          output_index=self.output.index(item), delta=fn["arguments"]))
        return events

    def _add(self, item: dict) -> list[dict]:
        self.output.append(item)
        self.open = item
        return [self._event("response.output_item.added", output_index=len(self.output) - 1, item=_public(item))]

    def _close(self) -> list[dict]:
        item, self.open = self.open, None
        if item is None:
            return []
        index = self.output.index(item)
        events = []
        if item["type"] == "reasoning":
            text = item.pop("_text")
            events.append(self._event("response.reasoning_text.done", item_id=item["id"], output_index=index,
                                      content_index=0, text=text))
            item["content"] = [{"type": "reasoning_text", "text": text}]
        elif item["type"] == "message":
            text = item.pop("_text")
            part = {"type": "output_text", "text": text, "annotations": []}
            events += [self._event("response.output_text.done", item_id=item["id"], output_index=index,
                                   content_index=0, text=text, logprobs=[]),
                       self._event("response.content_part.done", item_id=item["id"], output_index=index,
                                   content_index=0, part=part)]
            item["content"] = [part]
        elif item["type"] == "custom_tool_call":
            item["input"] = custom.decode_input(item.pop("_arguments"))
            if item["input"]:
                events.append(self._event("response.custom_tool_call_input.delta", item_id=item["id"],
                                          output_index=index, delta=item["input"]))
            events.append(self._event("response.custom_tool_call_input.done", item_id=item["id"],
                                      output_index=index, input=item["input"]))
        else:
            item.pop("_arguments")
            events.append(self._event("response.function_call_arguments.done", item_id=item["id"],
                                      output_index=index, name=item["name"], arguments=item["arguments"]))
        item["status"] = "completed"
        events.append(self._event("response.output_item.done", output_index=index, item=dict(item)))
        return events

    def finish_events(self) -> list[dict]:
        """The closing events, after the last chunk."""
        events = self.start() + self._close()
        self.final = self._snapshot("incomplete" if self.finish == "length" else "completed")
        kind = "response.incomplete" if self.final["status"] == "incomplete" else "response.completed"
        return events + [self._event(kind, response=self.final)]

    def error_event(self, error: Mapping[str, Any]) -> list[dict]:
        """A failure after the stream started (the chat stream sent an error)."""
        err = error.get("error", error) if isinstance(error, Mapping) else {}
        return self.start() + [self._event("error", code=err.get("code"), message=err.get("message", str(error)),
                                           param=err.get("param"))]


def _public(item: dict) -> dict:
    return {k: v for k, v in item.items() if not k.startswith("_")}
