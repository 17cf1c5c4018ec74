"""The JSON shapes that cross boundaries untyped on purpose (tool arguments, task data, payloads).

Defined once here; where a shape is known, a pydantic model or a dataclass is used instead.
"""

from __future__ import annotations

from typing import Any

JsonObject = dict[str, Any]
"""A JSON object whose keys are strings and whose values are not checked here."""
