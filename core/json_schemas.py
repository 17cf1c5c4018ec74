"""JSON Schemas a client writes (tool and workflow ``input_schema``s, an ``llm`` action's
``json_schema``), checked and evaluated in bounded time.

JSON Schema's ``pattern`` and ``patternProperties`` are regular expressions; Python's ``re``
backtracks, so one pattern like ``^(a+)+$`` and a 40-character input can hold a process for
seconds. Here every pattern runs on RE2 (linear in the input, no backreferences or lookaround):
``check_schema`` refuses, when a schema is stored, any pattern RE2 cannot compile (with the
pattern's place in the schema), and ``validator`` validates with RE2 in place of ``re``. The
validation itself still takes time proportional to schema and input: callers in async code run it
in a worker thread.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

import re2
from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import SchemaError, ValidationError
from jsonschema.protocols import Validator

from core.jsontypes import JsonObject

MAX_PATTERN_CHARS = 1000
RE2_MAX_MEM = 8 << 20  # bytes of compiled program one pattern may take
_NOT_SCHEMAS = frozenset({"const", "enum", "default", "examples"})  # values, not subschemas


def _options() -> re2.Options:
    options = re2.Options()
    options.log_errors = False
    options.max_mem = RE2_MAX_MEM
    return options


@lru_cache(maxsize=1024)
def compiled(pattern: str) -> Any:
    """``pattern`` compiled by RE2 (``ValueError`` saying why when it cannot be)."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ValueError(f"longer than {MAX_PATTERN_CHARS} characters")
    try:
        return re2.compile(pattern, _options())
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        text = reason.decode(errors="replace") if isinstance(reason, bytes) else str(reason)
        raise ValueError(text) from None


def patterns(schema: Any, where: str = "") -> Iterator[tuple[str, str]]:
    """Every regular expression in ``schema``: ``(place, pattern)``."""
    if isinstance(schema, list):
        for index, item in enumerate(schema):
            yield from patterns(item, f"{where}/{index}")
        return
    if not isinstance(schema, dict):
        return
    for key, value in schema.items():
        place = f"{where}/{key}"
        if key == "pattern" and isinstance(value, str):
            yield place, value
        elif key == "patternProperties" and isinstance(value, dict):
            for regex, sub in value.items():
                yield f"{place}/{regex}", regex
                yield from patterns(sub, f"{place}/{regex}")
        elif key not in _NOT_SCHEMAS:
            yield from patterns(value, place)


def check_schema(schema: JsonObject, field: str = "input_schema") -> None:
    """``ValueError`` with a precise message unless ``schema`` is a valid JSON Schema whose
    patterns all compile on RE2."""
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        raise ValueError(f"{field} is not a valid JSON Schema: {exc.message}") from None
    for place, pattern in patterns(schema):
        try:
            compiled(pattern)
        except ValueError as exc:
            raise ValueError(
                f"{field}{place or '/'}: pattern {pattern[:80]!r} is refused ({exc}); patterns "
                "run in linear time (RE2 syntax: no backreferences, no lookahead or lookbehind)"
            ) from None


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not _search(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(
    validator: Any, properties: dict[str, Any], instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in properties.items():
        for key, value in instance.items():
            if _search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _search(pattern: str, text: str) -> bool:
    try:
        return compiled(pattern).search(text) is not None
    except ValueError:
        return False  # a pattern RE2 refuses matches nothing (stored schemas never have one)


LinearValidator = validators.extend(
    Draft202012Validator,
    validators={"pattern": _pattern, "patternProperties": _pattern_properties},
)


@lru_cache(maxsize=256)
def _validator_for(text: str) -> Validator:
    validator: Validator = LinearValidator(json.loads(text))
    return validator


def validator(schema: JsonObject) -> Validator:
    """A Draft 2020-12 validator of ``schema`` whose patterns run on RE2 (cached by schema)."""
    return _validator_for(json.dumps(schema, sort_keys=True))


def errors(schema: JsonObject, value: Any) -> list[ValidationError]:
    """Every way ``value`` breaks ``schema``, sorted by where."""
    return sorted(validator(schema).iter_errors(value), key=lambda e: list(e.path))
