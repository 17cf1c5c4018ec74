"""Unknown query parameters are refused, on every HTTP route (issue 12: the API keeps its contract).

A query parameter a route does not declare is almost always a typo (``?limt=5``) that would
otherwise be ignored in silence; the gateway answers 422 naming each one (``query.<name>``), in
the one error shape. ``create_api`` installs ``refuse_unknown_query`` as an app-wide dependency, so
every router, including ones added later, gets it without doing anything. WebSocket routes and
routes outside the OpenAPI document (the console) are not checked.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any

from fastapi.dependencies.utils import get_flat_dependant
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import BaseModel, BeforeValidator
from starlette.requests import HTTPConnection

_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})")


def _rfc3339(value: Any) -> Any:
    """A time in a query as its schema states it (RFC 3339 ``date-time``, with its offset): not
    a bare date, a time without a zone, or a number of seconds, which pydantic would accept."""
    if isinstance(value, str) and not _RFC3339.fullmatch(value):
        raise ValueError(
            "expected an RFC 3339 date-time with a time zone, e.g. 2026-01-31T12:00:00Z"
        )
    return value


Rfc3339Time = Annotated[datetime, BeforeValidator(_rfc3339)]

_declared: dict[int, frozenset[str]] = {}  # route id -> its declared query names (routes live on)


def declared_query(route: APIRoute) -> frozenset[str]:
    """The query parameter names ``route`` declares (its dependencies' included)."""
    found = _declared.get(id(route))
    if found is None:
        names: set[str] = set()
        for param in get_flat_dependant(route.dependant).query_params:
            annotation = param.field_info.annotation
            if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                names |= {f.alias or n for n, f in annotation.model_fields.items()}
            else:
                names.add(param.alias)
        found = _declared[id(route)] = frozenset(names)
    return found


async def refuse_unknown_query(request: HTTPConnection) -> None:
    route = request.scope.get("route")  # an APIWebSocketRoute for a WebSocket: not checked
    if not isinstance(route, APIRoute) or not route.include_in_schema:
        return  # the console's pages and files are not part of the API's contract
    unknown = sorted(set(request.query_params) - declared_query(route))
    if unknown:
        raise RequestValidationError(
            [
                {
                    "type": "extra_forbidden",
                    "loc": ("query", name),
                    "msg": "unknown query parameter",
                    "input": request.query_params.get(name),
                }
                for name in unknown
            ]
        )
