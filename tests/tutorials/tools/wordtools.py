"""Tools of my own for Wonder's agents."""

from typing import Any

from core.callables import library_callable


@library_callable
def count_words(data: dict[str, Any]) -> dict[str, Any]:
    """Count the words of a text: {"text": "..."} -> {"words": N}."""
    text = data.get("text")
    if not isinstance(text, str):
        raise ValueError("count_words needs a 'text' string")
    return {"words": len(text.split())}
