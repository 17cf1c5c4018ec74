"""Executor actions: the primitives a library task is made of (see ``registry``).

Each module registers its actions by kind with ``@action``; ``actors.executor`` imports them all.
Libraries add their own as ``python`` callables (see ``actors.actions.python_call``).
"""

from actors.actions.registry import ActionContext, ActionServices, action, get_action
from core.jsontypes import JsonObject

__all__ = ["ActionContext", "ActionServices", "JsonObject", "action", "get_action"]
