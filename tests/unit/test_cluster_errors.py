"""How Ray's failures become Wonder's errors at the adapters (``cluster.naming``). No cluster."""

from __future__ import annotations

from ray.exceptions import ActorUnavailableError, RayTaskError

from cluster.naming import as_wonder_error
from core.errors import NonRetryableError, NotFound, RetryableError, Unavailable


def test_an_actors_own_error_comes_back_as_it_was_raised() -> None:
    wrapped = RayTaskError("post_message", "traceback", NotFound("conversation c not found"))
    error = as_wonder_error(wrapped, "conversation c")
    assert isinstance(error, NotFound) and error.message == "conversation c not found"
    retriable = RayTaskError("post_message", "traceback", Unavailable("busy"))
    assert isinstance(as_wonder_error(retriable, "conversation c"), Unavailable)


def test_a_bug_inside_an_actor_is_not_retried() -> None:
    wrapped = RayTaskError("post_message", "traceback", ValueError("bad"))
    error = as_wonder_error(wrapped, "conversation c")
    assert isinstance(error, NonRetryableError) and "ValueError: bad" in error.message


def test_an_unreachable_actor_is_retryable() -> None:
    error = as_wonder_error(ActorUnavailableError("gone", None), "conversation c")
    assert isinstance(error, RetryableError) and error.message.startswith("conversation c:")
