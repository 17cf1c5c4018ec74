"""``artifact.write`` / ``artifact.read`` / ``artifact.search``: a project's versioned knowledge.

Artifacts live in the project's artifacts repository (``core.artifacts``: one commit per write,
every version readable). Each write is also indexed with the memory machinery (LanceDB, the
embedder, the object store for large content) in the corpus ``project:<project_id>``, type
``artifact``; ``artifact.search`` searches that corpus (vector, full-text or hybrid) and answers
with one hit per artifact, pointing at its latest version. The project is the one named
(``project_id``, which must be one of the acting agent's), else the conversation's.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from actors.actions import ActionContext, JsonObject, action
from core.artifacts import ArtifactRepository, artifact_path
from core.domain import Project
from core.errors import InvalidInput
from core.memory import NewMemory, SearchMode, SearchRequest
from core.projects import project_for_call

ARTIFACT_TYPE = "artifact"
MAX_ARTIFACT_BYTES = 1_000_000
MAX_K = 50


def artifact_corpus(project_id: str) -> str:
    """The memory corpus (the ``agent_id`` key) that indexes a project's artifacts."""
    return f"project:{project_id}"


def _get(params: JsonObject, data: JsonObject, name: str, default: Any = None) -> Any:
    """``params[name]``, else the tool input's (a template that filled in nothing is missing)."""
    if params.get(name) is not None:
        return params[name]
    return data.get(name) if data.get(name) is not None else default


def _str(params: JsonObject, data: JsonObject, name: str, default: str | None = None) -> str:
    value = _get(params, data, name, default)
    if not isinstance(value, str):
        raise InvalidInput(f"{name} must be a string")
    return value


async def _project(params: JsonObject, data: JsonObject, ctx: ActionContext) -> Project:
    requested = _get(params, data, "project_id")
    if requested is not None and not isinstance(requested, str):
        raise InvalidInput("project_id must be a string")
    return await asyncio.to_thread(
        project_for_call, ctx.services.store, ctx.conversation_id, ctx.agent_id, requested
    )


def _repository(project: Project) -> ArtifactRepository:
    return ArtifactRepository(Path(project.artifacts_repository))


def _title(path: str, content: str, given: str | None) -> str:
    if given:
        return given[:200]
    for line in content.splitlines():
        if line.strip():
            return line.strip().lstrip("#").strip()[:200]
    return path


@action("artifact.write")
async def artifact_write(params: JsonObject, data: JsonObject, ctx: ActionContext) -> Any:
    """``{path, content, title?, message?}`` → ``{path, commit, title}`` (a new version)."""
    path = artifact_path(_str(params, data, "path"))
    content = _str(params, data, "content")
    if len(content.encode()) > MAX_ARTIFACT_BYTES:
        raise InvalidInput(f"content is over {MAX_ARTIFACT_BYTES} bytes")
    title_in = _get(params, data, "title")
    title = _title(path, content, title_in if isinstance(title_in, str) else None)
    message = _str(params, data, "message", f"Update {path}")
    project = await _project(params, data, ctx)
    repo = _repository(project)
    commit = await asyncio.to_thread(repo.write, path, content, message, ctx.agent_id)
    service = await ctx.services.memory.service()
    indexed = NewMemory(
        type=ARTIFACT_TYPE,
        content=f"{title}\n\n{content}" if content.strip() else title,
        metadata={"path": path, "commit": commit, "title": title, "project_id": project.id},
    )
    await service.write(artifact_corpus(project.id), [indexed], dedupe="none")
    return {"path": path, "commit": commit, "title": title, "project_id": project.id}


@action("artifact.read")
async def artifact_read(params: JsonObject, data: JsonObject, ctx: ActionContext) -> Any:
    """``{path, version?}`` → ``{path, commit, content, versions}`` (newest version first)."""
    path = artifact_path(_str(params, data, "path"))
    version = _get(params, data, "version")
    if version is not None and not isinstance(version, str):
        raise InvalidInput("version must be a commit id")
    project = await _project(params, data, ctx)
    repo = _repository(project)
    found = await asyncio.to_thread(repo.read, path, version)
    versions = await asyncio.to_thread(repo.versions, path)
    return {
        "path": found.path,
        "commit": found.commit,
        "content": found.content,
        "versions": versions,
    }


@action("artifact.search")
async def artifact_search(params: JsonObject, data: JsonObject, ctx: ActionContext) -> Any:
    """``{query, k?, mode?}`` → ``{hits: [{path, title, commit, score}]}``, one per artifact."""
    query = _str(params, data, "query")
    if not query.strip():
        raise InvalidInput("query must not be empty")
    k = _get(params, data, "k", 5)
    if not isinstance(k, int) or not 1 <= k <= MAX_K:
        raise InvalidInput(f"k must be an integer from 1 to {MAX_K}")
    try:
        mode = SearchMode(_str(params, data, "mode", SearchMode.VECTOR.value))
    except ValueError:
        raise InvalidInput(f"mode must be one of {[m.value for m in SearchMode]}") from None
    project = await _project(params, data, ctx)
    service = await ctx.services.memory.service()
    request = SearchRequest(query=query, k=min(k * 3, 100), mode=mode, types=(ARTIFACT_TYPE,))
    hits = await service.search(artifact_corpus(project.id), request)
    latest = await asyncio.to_thread(lambda: set(_repository(project).paths()))
    out: list[JsonObject] = []
    seen: set[str] = set()
    for hit in hits:
        path = str(hit.memory.metadata.get("path", ""))
        if path in seen or path not in latest:
            continue
        seen.add(path)
        title = str(hit.memory.metadata.get("title", path))
        out.append({"path": path, "title": title, "score": round(hit.score, 6)})
        if len(out) >= k:
            break
    return {"project_id": project.id, "hits": out}
