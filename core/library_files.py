"""Library directories: ``DIR/<kind>/*.yaml`` read, validated and stored as new versions.

A library directory holds one folder per kind (``personas``, ``model_profiles``, ``tools``,
``tasks``, ``workflows``), one object per YAML file; an object without ``id`` takes its file name.
Every file is validated by its pydantic model before anything is stored, and every problem is
reported at once with its file and field path, so a broken library changes nothing. References
between objects (a persona's tools and model profile, a tool's task) that resolve neither in the
directory nor in the store are reported as warnings: they may be applied later.

A directory is applied into one library (issue 13): the system library (the default; what ships
with Wonder) or a named client's. A client's library may not reuse an id the system library
holds: such a directory is refused whole, as the gateway refuses a ``PUT`` (403).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from core.errors import InvalidInput, NotFound
from core.library_policy import policy_problems
from core.settings import Settings, load_settings
from core.store import Store
from core.store.library import SYSTEM

# Applied in this order so that what is referenced exists before what references it.
KINDS: tuple[str, ...] = ("model_profiles", "tasks", "workflows", "tools", "personas")
MAX_FILE_BYTES = 1_000_000


@dataclass(frozen=True)
class LibraryObject:
    kind: str
    source: str  # "personas/assistant.yaml", for messages
    obj: BaseModel

    @property
    def id(self) -> str:
        return str(getattr(self.obj, "id", ""))


@dataclass(frozen=True)
class Applied:
    kind: str
    id: str
    version: int
    changed: bool


@dataclass
class LibraryReport:
    applied: list[Applied] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def parse_object(kind: str, source: str, text: str, model: type[BaseModel]) -> BaseModel:
    """One library object from YAML text; ``InvalidInput`` lists every problem with its path."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        reason = getattr(exc, "problem", None) or str(exc)
        raise InvalidInput(f"{source}{where}: invalid YAML: {reason}") from None
    if not isinstance(data, dict):
        raise InvalidInput(f"{source}: expected a mapping of fields, got {type(data).__name__}")
    data.setdefault("id", Path(source).stem)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = [
            f"{source}: {'.'.join(str(p) for p in err['loc']) or '(file)'}: {err['msg']}"
            for err in exc.errors()
        ]
        raise InvalidInput("\n".join(problems)) from None


def library_models(store: Store) -> dict[str, type[BaseModel]]:
    """The kinds this store keeps, with the model that validates each."""
    models: dict[str, type[BaseModel]] = {}
    for kind in KINDS:
        ops = getattr(store, kind, None)
        if ops is not None:
            models[kind] = ops.model
    return models


def read_library(directory: Path, models: dict[str, type[BaseModel]]) -> list[LibraryObject]:
    """Every object under ``directory``, validated; ``InvalidInput`` with all problems otherwise."""
    if not directory.is_dir():
        raise InvalidInput(f"{directory} is not a directory")
    found: list[LibraryObject] = []
    problems: list[str] = []
    for kind, model in models.items():
        for path in sorted((directory / kind).glob("*.y*ml")):
            source = f"{kind}/{path.name}"
            try:
                if path.stat().st_size > MAX_FILE_BYTES:
                    raise InvalidInput(f"{source}: larger than {MAX_FILE_BYTES} bytes")
                text = path.read_text(encoding="utf-8")
                found.append(LibraryObject(kind, source, parse_object(kind, source, text, model)))
            except InvalidInput as exc:
                problems.append(exc.message)
            except (OSError, UnicodeDecodeError) as exc:
                problems.append(f"{source}: cannot read: {exc}")
    problems += _duplicates(found)
    unknown = _unknown_folders(directory, models)
    if problems:
        raise InvalidInput("\n".join(problems))
    if not found:
        raise InvalidInput(
            f"{directory} holds no library files (expected {', '.join(models)} folders"
            f" of *.yaml){unknown}"
        )
    return found


def _duplicates(found: list[LibraryObject]) -> list[str]:
    seen: dict[tuple[str, str], str] = {}
    problems = []
    for item in found:
        key = (item.kind, item.id)
        if key in seen:
            problems.append(f"{item.source}: id {item.id!r} is also defined in {seen[key]}")
        seen[key] = item.source
    return problems


def _unknown_folders(directory: Path, models: dict[str, type[BaseModel]]) -> str:
    others = sorted(p.name for p in directory.iterdir() if p.is_dir() and p.name not in models)
    return f"; ignored folders: {', '.join(others)}" if others else ""


def unresolved_references(
    objects: Iterable[LibraryObject], store: Store, owner: str = SYSTEM
) -> list[str]:
    """Warnings for references that resolve neither among ``objects`` nor in what ``owner``'s
    library sees in ``store`` (a client: its own and the system's)."""
    objects = list(objects)
    defined = {(o.kind, o.id) for o in objects}

    def exists(kind: str, obj_id: str) -> bool:
        if (kind, obj_id) in defined:
            return True
        try:
            getattr(store, kind).get(obj_id, client_id=None if owner == SYSTEM else owner)
        except NotFound:
            return False
        return True

    warnings = []
    for item in objects:
        for kind, ref in _references(item):
            if not exists(kind, ref):
                warnings.append(
                    f"{item.source}: refers to {kind[:-1]} {ref!r}, which is not defined"
                )
    return warnings


def _references(item: LibraryObject) -> list[tuple[str, str]]:
    obj: Any = item.obj
    if item.kind == "personas":
        refs = [("model_profiles", obj.model_profile_id)] + [("tools", t) for t in obj.tool_ids]
        refs += [
            ("tasks", hook)
            for hook in (obj.context_assembly_task_id, obj.memory_extraction_task_id)
            if hook
        ]
        refs += [
            ("workflows", hook)
            for hook in (obj.context_assembly_workflow, obj.memory_extraction_workflow)
            if hook
        ]
        upkeep = obj.memory_upkeep
        strategy = upkeep.strategy if upkeep is not None else None
        if strategy is not None:
            refs.append((f"{strategy[0]}s", strategy[1]))
        return refs
    if item.kind == "tools" and obj.target_type in ("task", "workflow"):
        return [(f"{obj.target_type}s", obj.target_id)]
    return []


def policy_refusals(objects: Iterable[LibraryObject], settings: Settings) -> list[str]:
    """What the operator's policy refuses among ``objects`` (``core.library_policy``)."""
    return [
        f"{item.source}: {problem}"
        for item in objects
        for problem in policy_problems(item.obj, settings)
    ]


def system_ids_taken(objects: Iterable[LibraryObject], store: Store, owner: str) -> list[str]:
    """Objects a client's library may not hold: ids only the system library has."""
    if owner == SYSTEM:
        return []
    return [
        f"{item.source}: {item.kind[:-1]} {item.id!r} belongs to the system library (read-only)"
        for item in objects
        if getattr(store, item.kind).owner_of(item.id, owner) == SYSTEM
    ]


def apply_library(
    store: Store,
    directory: Path,
    now: datetime,
    settings: Settings | None = None,
    owner: str = SYSTEM,
) -> LibraryReport:
    """Validate everything under ``directory``, then store each object as a new version in
    ``owner``'s library (``SYSTEM`` or a client id).

    An object identical to its latest stored version is left as it is (``changed`` False). Objects
    the policy refuses under ``settings`` (default: this process's), or ids a client may not use,
    fail the whole directory.
    """
    objects = read_library(directory, library_models(store))
    refused = policy_refusals(objects, settings or load_settings())
    refused += system_ids_taken(objects, store, owner)
    if refused:
        raise InvalidInput("\n".join(refused))
    report = LibraryReport(warnings=unresolved_references(objects, store, owner))
    order = {kind: n for n, kind in enumerate(KINDS)}
    for item in sorted(objects, key=lambda o: (order[o.kind], o.id)):
        ops = getattr(store, item.kind)
        try:
            before: int | None = ops.get(item.id, owner=owner).version
        except NotFound:
            before = None
        stored = ops.put(item.obj, now, owner=owner)
        report.applied.append(Applied(item.kind, item.id, stored.version, stored.version != before))
    return report
