"""A conversation's branch and workspace: the branch, its diff against the default branch, an
explicit merge into it (conflicts reported with their files, never forced), the workspace's status.

Only the conversation's owner reaches these (another client's conversation is a 404). The branch
routes read the project's repository directly; the status asks the live workspace actor.
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from core.domain import Conversation, Project
from core.errors import Conflict, Unavailable
from core.git import GitRepository
from core.projects import repository_of
from core.settings import settings_from_env
from core.workspaces import WorkspaceStatus, workspace_spec
from serving.gateway.auth import ClientId, Context
from serving.gateway.context import GatewayContext
from serving.gateway.errors import error_body

router = APIRouter(prefix="/v1/conversations/{conversation_id}", tags=["workspaces"])


class WireModel(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Commit(WireModel):
    commit: str
    subject: str
    author: str
    date: str


class BranchInfo(WireModel):
    conversation_id: str
    project_id: str
    branch: str
    default_branch: str
    head: str
    ahead: int = Field(description="Commits on the branch not on the default branch")
    behind: int = Field(description="Commits on the default branch not on the branch")
    commits: list[Commit] = Field(description="The branch's newest commits")


class BranchDiffOut(WireModel):
    base: str
    branch: str
    files: list[str]
    diff: str
    truncated: bool


class MergeRequest(WireModel):
    message: str | None = Field(None, min_length=1, max_length=2000)


class MergeResult(WireModel):
    status: str = Field(description="merged, or up_to_date when nothing was left to merge")
    commit: str | None
    default_branch: str


def _branch_of(
    context: GatewayContext, client_id: str, conversation_id: str
) -> tuple[Conversation, Project, GitRepository]:
    conversation = context.store.conversations.get(conversation_id, client_id=client_id)
    if conversation.branch is None or conversation.project_id is None:
        raise Conflict(f"conversation {conversation_id} has no project branch")
    project = context.store.projects.get(conversation.project_id, client_id=client_id)
    return conversation, project, repository_of(project)


@router.get("/branch", response_model=BranchInfo, summary="The conversation's working branch")
def branch(conversation_id: str, context: Context, client_id: ClientId) -> BranchInfo:
    conversation, project, repo = _branch_of(context, client_id, conversation_id)
    name = conversation.branch or ""
    ahead, behind = repo.ahead_behind(project.default_branch, name)
    return BranchInfo(
        conversation_id=conversation.id,
        project_id=project.id,
        branch=name,
        default_branch=project.default_branch,
        head=repo.require_branch(name),
        ahead=ahead,
        behind=behind,
        commits=[Commit(**entry) for entry in repo.log(name, limit=min(ahead, 20))]
        if ahead
        else [],
    )


@router.get(
    "/diff",
    response_model=BranchDiffOut,
    summary="What the branch changed since it left the default branch (committed work)",
)
def diff(conversation_id: str, context: Context, client_id: ClientId) -> BranchDiffOut:
    conversation, project, repo = _branch_of(context, client_id, conversation_id)
    found = repo.branch_diff(project.default_branch, conversation.branch or "")
    return BranchDiffOut(
        base=found.base,
        branch=found.head,
        files=list(found.files),
        diff=found.diff,
        truncated=found.truncated,
    )


@router.post(
    "/merge",
    response_model=MergeResult,
    summary="Merge the branch into the default branch (409 with the conflicting files)",
)
def merge(
    conversation_id: str, context: Context, client_id: ClientId, body: MergeRequest | None = None
) -> MergeResult | JSONResponse:
    conversation, project, repo = _branch_of(context, client_id, conversation_id)
    name = conversation.branch or ""
    outcome = repo.merge(name, project.default_branch, body.message if body else None)
    if outcome.status == "conflicts":
        error = Conflict(
            f"merging {name} into {project.default_branch} conflicts in "
            f"{', '.join(outcome.conflicts)}; nothing was changed"
        )
        details = [{"path": path, "message": "merge conflict"} for path in outcome.conflicts]
        return JSONResponse(status_code=409, content=error_body(error, details))
    return MergeResult(
        status=outcome.status, commit=outcome.commit, default_branch=project.default_branch
    )


@router.get(
    "/workspace",
    response_model=WorkspaceStatus,
    summary="The workspace: its branch's head and the uncommitted files in its worktree",
)
async def workspace(conversation_id: str, context: Context, client_id: ClientId) -> WorkspaceStatus:
    conversation, project, _ = await run_in_threadpool(
        _branch_of, context, client_id, conversation_id
    )
    if context.workspaces is None:
        raise Unavailable("workspaces are not available on this gateway")
    settings = settings_from_env(context.settings_env)
    spec = workspace_spec(settings, conversation, project.repository, project.default_branch)
    return await context.workspaces.status(spec)
