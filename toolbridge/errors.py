"""Errors the adapters turn into OpenAI error bodies."""
from __future__ import annotations


class BadRequest(ValueError):
    """A request the server must answer with 400 and an OpenAI error body."""

    def __init__(self, message: str, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code

    def body(self) -> dict:
        """The OpenAI-shaped error body for this request error."""
        return {"error": {"message": self.message, "type": "invalid_request_error",
                          "param": self.param, "code": self.code or "invalid_request"}}
