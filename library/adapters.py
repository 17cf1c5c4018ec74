"""Adapters: the last step of a context-assembly hook, turning what the hook gathered into the
provider-native request (seed 001's adapter pattern; ``core.context_contract``).

``adapter_openai`` is a ``python`` callable: it takes the request the loop would send (the hook's
input ``request``) and what the previous steps rendered (``previous.system_context``, optional
``previous.index`` and ``previous.messages``) and answers with the complete chat-completions
request, under the contract's version. A library hook that wants another layout (history
reordered, an index block, fewer turns) writes its own step in the same shape.
"""

from __future__ import annotations

from typing import Any

from core.callables import library_callable
from core.context_contract import CONTEXT_CONTRACT


@library_callable
def adapter_openai(data: dict[str, Any]) -> dict[str, Any]:
    """The default request with the gathered context added to its system message."""
    task_input = data.get("input") or {}
    previous = data.get("previous") or {}
    if not isinstance(previous, dict):
        previous = {}
    request = dict(task_input.get("request") or {})
    messages = [dict(m) for m in previous.get("messages") or request.get("messages") or []]
    blocks = [str(previous[key]) for key in ("system_context", "index") if previous.get(key)]
    if blocks:
        if messages and messages[0].get("role") == "system":
            head = messages[0]
            head["content"] = "\n\n".join([str(head.get("content") or ""), *blocks])
        else:
            messages.insert(0, {"role": "system", "content": "\n\n".join(blocks)})
    request = {
        key: value
        for key, value in request.items()
        if key in ("tools", "temperature", "max_tokens")
    }
    return {"contract": CONTEXT_CONTRACT, "request": {**request, "messages": messages}}


@library_callable
def newest_first_with_index(data: dict[str, Any]) -> dict[str, Any]:
    """An example of a hook that chooses what history the model sees
    (docs/internals/contracts.md): an index of the earlier questions in the system message, the
    earlier exchanges newest first, and the current message last."""
    task_input = data.get("input") or {}
    request = dict(task_input.get("request") or {})
    messages = [dict(m) for m in request.get("messages") or []]
    system = messages.pop(0) if messages and messages[0].get("role") == "system" else None
    current = messages.pop() if messages else None
    questions = [str(m.get("content") or "") for m in messages if m.get("role") == "user"]
    index = "Index of earlier questions:\n" + "\n".join(
        f"{n}. {question[:80]}" for n, question in enumerate(questions, 1)
    )
    head = {
        "role": "system",
        "content": "\n\n".join([str((system or {}).get("content") or ""), index]),
    }
    pairs = [messages[i : i + 2] for i in range(0, len(messages), 2)]
    reordered = [message for pair in reversed(pairs) for message in pair]
    request["messages"] = [head, *reordered, *([current] if current else [])]
    request.pop("model", None)  # the profile decides the model
    return {"contract": CONTEXT_CONTRACT, "request": request}
