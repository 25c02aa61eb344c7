"""What both agent-API readers and writers share: reading a required string field, new ids."""
from __future__ import annotations

import uuid
from typing import Mapping

from ..errors import BadRequest


def string_field(obj: Mapping, key: str, where: str) -> str:
    """obj[key], which must be a string (BadRequest naming where it is otherwise)."""
    value = obj.get(key)
    if not isinstance(value, str):
        raise BadRequest(f"{where}.{key} must be a string.", param=f"{where}.{key}")
    return value


def new_id(prefix: str) -> str:
    """An id in OpenAI's and Anthropic's style: a prefix, an underscore, 32 hex digits."""
    return f"{prefix}_{uuid.uuid4().hex}"
