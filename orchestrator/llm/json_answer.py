"""An LLM answer that is one JSON object, in a ```json block (or bare); of several blocks, the last."""

from __future__ import annotations

import json
import re
from typing import Any

_FENCED = re.compile(r"```(?:json)?\s*(\{.*?\})\s*```", re.S)


def json_object(text: str, what: str) -> dict[str, Any]:
    """The answer's JSON object (its last ```json block: a draft the answer corrects comes first); ValueError
    naming `what` the object should be when there is none."""
    fenced = _FENCED.findall(text)
    candidate = fenced[-1] if fenced else text[text.find("{"): text.rfind("}") + 1]
    try:
        value = json.loads(candidate)
    except json.JSONDecodeError as exc:
        raise ValueError(f"the answer must be one JSON object ({what}) in a ```json block: {exc}") from exc
    if not isinstance(value, dict):
        raise ValueError(f"the answer must be one JSON object ({what}) in a ```json block")
    return value
