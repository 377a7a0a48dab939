"""Tool-call arguments made valid JSON where the model's meaning is plain: the one owner of
`json_repair`, used where answers enter (gateway/llm/types.py, provider.py and summary.py), so
every reader of a call (the tools' registry, consolidation, the session file) sees JSON.

Local servers constrain tool calls with a grammar that lets raw control characters (a raw newline)
inside strings, and small models write near-JSON (single quotes, a trailing comma, a code fence).
A call cut off by the output limit is never repaired: closing its brackets would make a shortened
MEMORY.md look whole.
"""

from __future__ import annotations

import json
from typing import Any

import json_repair


def valid_arguments(text: str, cut: bool = False) -> str:
    """`text` as it came when it is a JSON object already, or when nothing sure can be made of it
    (the tool then reports it as not JSON); else the object it means, as JSON text. `cut`: the
    answer stopped at its output limit, so only raw control characters are accepted."""
    try:
        json.loads(text)
    except ValueError:
        pass
    else:
        return text
    parsed: Any
    try:
        parsed = json.loads(text, strict=False)  # control characters inside strings
    except ValueError:
        if cut:
            return text
        parsed = json_repair.loads(text)
    if not isinstance(parsed, dict):
        return text
    return json.dumps(parsed, ensure_ascii=False)
