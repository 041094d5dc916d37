"""An LLM answer that is one JSON object, in a ```json block (or bare)."""

from __future__ import annotations

import json
import re
from typing import Any

_FENCED = re.compile(r"```(?:json)?\s*(\{.*?\})\s*```", re.S)


def json_object(text: str, what: str) -> dict[str, Any]:
    """The answer's JSON object; ValueError naming `what` the object should be when there is none."""
    fenced = _FENCED.search(text)
    candidate = fenced.group(1) if fenced else text[text.find("{"): text.rfind("}") + 1]
    try:
        value = json.loads(candidate)
    except json.JSONDecodeError as exc:
        raise ValueError(f"the answer must be one JSON object ({what}) in a ```json block: {exc}") from exc
    if not isinstance(value, dict):
        raise ValueError(f"the answer must be one JSON object ({what}) in a ```json block")
    return value
