"""Strict scalars at the boundaries: no ``false`` taken as a number, no ``0`` or ``"1"`` as a
boolean or number (issue 12: the API keeps its contract).

Pydantic's lax mode coerces between booleans, numbers and numeric strings; JSON Schema, which the
OpenAPI document publishes, does not. ``StrictScalars`` refuses those coercions for every field
whose type is a number or a boolean (plain, optional, or a union of them), and leaves everything
else to pydantic (dates from strings, enums, nested models). Floats still take integers.
"""

from __future__ import annotations

import types
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, model_validator

_SCALARS = (bool, int, float)
_fields: dict[type, tuple[tuple[tuple[str, ...], frozenset[type]], ...]] = {}


def scalar_kinds(annotation: Any) -> frozenset[type]:
    """The scalar types (bool, int, float) an annotation admits; empty if it admits others."""
    if get_origin(annotation) in (Union, types.UnionType):
        found: set[type] = set()
        for arg in get_args(annotation):
            if arg is type(None):
                continue
            kinds = scalar_kinds(arg)
            if not kinds:
                return frozenset()
            found |= kinds
        return frozenset(found)
    if get_origin(annotation) is not None and hasattr(annotation, "__metadata__"):
        return scalar_kinds(get_args(annotation)[0])
    return frozenset({annotation}) if annotation in _SCALARS else frozenset()


def refuse_coercion(kinds: frozenset[type], value: Any, name: str) -> None:
    """Raise ``ValueError`` if pydantic would have to coerce ``value`` into one of ``kinds``."""
    if not kinds or value is None:
        return
    if isinstance(value, bool):
        if bool not in kinds:
            raise ValueError(f"{name}: expected a number, not a boolean")
    elif isinstance(value, int | float):
        if not kinds & {int, float}:
            raise ValueError(f"{name}: expected a boolean, not a number")
        if isinstance(value, float) and kinds == {int} and not value.is_integer():
            return  # pydantic's own error says it
    elif isinstance(value, str):
        raise ValueError(f"{name}: expected a {'boolean' if kinds == {bool} else 'number'}")


class StrictScalars(BaseModel):
    """Base for models read from users: numbers and booleans are taken only as themselves."""

    @model_validator(mode="before")
    @classmethod
    def _strict_scalars(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for names, kinds in _scalar_fields(cls):
                for name in names:
                    if name in data:
                        refuse_coercion(kinds, data[name], name)
        return data


def _scalar_fields(cls: type[BaseModel]) -> tuple[tuple[tuple[str, ...], frozenset[type]], ...]:
    """Each number or boolean field of ``cls`` (by name and alias) and the scalars it admits."""
    found = _fields.get(cls)
    if found is None:
        fields = []
        for name, field in cls.model_fields.items():
            kinds = scalar_kinds(field.annotation)
            if kinds:
                fields.append(((name,) if not field.alias else (name, field.alias), kinds))
        found = _fields[cls] = tuple(fields)
    return found
