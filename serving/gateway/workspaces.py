"""Working branches over REST: a conversation's (or a workflow run's) branch, its diff against the
default branch, an explicit merge into it (conflicts reported with their files, never forced; with
the project's ``push_on_merge``, pushed back to the origin), and the workspace's status.

Only the owner reaches these (another client's conversation or run is a 404). The branch routes
read the project's repository directly; the status asks the live workspace actor.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from core.domain import Project
from core.errors import Conflict, Unavailable
from core.projects import merge_into_default, repository_of, workspace_spec
from core.settings import Settings
from core.store import Store
from core.workspaces import WorkspaceStatus
from serving.gateway.audit_trail import Audit, Auditor
from serving.gateway.auth import ClientId, Context
from serving.gateway.context import GatewayContext
from serving.gateway.errors import error_body
from serving.gateway.projects import remote_git

router = APIRouter(prefix="/v1/conversations/{conversation_id}", tags=["workspaces"])
run_router = APIRouter(prefix="/v1/workflow-runs/{run_id}", tags=["workspaces"])


class WireModel(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Commit(WireModel):
    commit: str
    subject: str
    author: str
    date: str


class BranchInfo(WireModel):
    conversation_id: str | None = Field(None, description="Set when asked of a conversation")
    run_id: str | None = Field(None, description="Set when asked of a workflow run")
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
    pushed: bool = Field(False, description="The default branch was pushed to the origin")
    push_error: str | None = Field(
        None, description="Why the push after the merge failed (the merge stands)"
    )


Workplace = tuple[Project, str]


def _of_conversation(context: GatewayContext, client_id: str, conversation_id: str) -> Workplace:
    conversation = context.store.conversations.get(conversation_id, client_id=client_id)
    if conversation.branch is None or conversation.project_id is None:
        raise Conflict(f"conversation {conversation_id} has no project branch")
    project = context.store.projects.get(conversation.project_id, client_id=client_id)
    return project, conversation.branch


def _of_run(context: GatewayContext, client_id: str, run_id: str) -> Workplace:
    run = context.workflows.get(run_id, client_id)
    if run.context.branch is None or run.context.project_id is None:
        raise Conflict(f"workflow run {run_id} works on no project branch")
    project = context.store.projects.get(run.context.project_id, client_id=client_id)
    return project, run.context.branch


def _branch(workplace: Workplace, **owner: str) -> BranchInfo:
    project, name = workplace
    repo = repository_of(project)
    ahead, behind = repo.ahead_behind(project.default_branch, name)
    return BranchInfo(
        **owner,
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


def _diff(workplace: Workplace) -> BranchDiffOut:
    project, name = workplace
    found = repository_of(project).branch_diff(project.default_branch, name)
    return BranchDiffOut(
        base=found.base,
        branch=found.head,
        files=list(found.files),
        diff=found.diff,
        truncated=found.truncated,
    )


def _merge(
    store: Store,
    workplace: Workplace,
    settings: Settings,
    body: MergeRequest | None,
    audit: Auditor,
    target: str,
) -> MergeResult | JSONResponse:
    project, name = workplace
    report = merge_into_default(store, project, settings, name, body.message if body else None)
    outcome = report.outcome
    merged = {
        "project_id": project.id,
        "branch": name,
        "into": project.default_branch,
        "status": outcome.status,
        "commit": outcome.commit,
        "pushed": report.pushed,
    }
    audit.record("merge", target, merged)
    if outcome.status == "conflicts":
        error = Conflict(
            f"merging {name} into {project.default_branch} conflicts in "
            f"{', '.join(outcome.conflicts)}; nothing was changed"
        )
        details = [{"path": path, "message": "merge conflict"} for path in outcome.conflicts]
        return JSONResponse(status_code=409, content=error_body(error, details))
    return MergeResult(
        status=outcome.status,
        commit=outcome.commit,
        default_branch=project.default_branch,
        pushed=report.pushed,
        push_error=report.push_error,
    )


BRANCH = "The working branch: head, commits ahead of and behind the default branch"
DIFF = "What the branch changed since it left the default branch (committed work)"
MERGE = (
    "Merge the branch into the default branch (409 with the conflicting files; with the "
    "project's push_on_merge, pushed to the origin)"
)


@router.get("/branch", response_model=BranchInfo, summary=BRANCH)
def branch(conversation_id: str, context: Context, client_id: ClientId) -> BranchInfo:
    workplace = _of_conversation(context, client_id, conversation_id)
    return _branch(workplace, conversation_id=conversation_id)


@router.get("/diff", response_model=BranchDiffOut, summary=DIFF)
def diff(conversation_id: str, context: Context, client_id: ClientId) -> BranchDiffOut:
    return _diff(_of_conversation(context, client_id, conversation_id))


async def _merge_off_the_pool(
    request: Request,
    context: GatewayContext,
    workplace: Workplace,
    body: MergeRequest | None,
    audit: Auditor,
    target: str,
) -> MergeResult | JSONResponse:
    """A merge may push to the origin: it runs with the replica's remote git, not on the
    request pool."""
    settings, store = context.settings, context.store
    return await remote_git(request, settings).run(
        lambda: _merge(store, workplace, settings, body, audit, target)
    )


@router.post("/merge", response_model=MergeResult, summary=MERGE)
async def merge(
    conversation_id: str,
    request: Request,
    context: Context,
    client_id: ClientId,
    audit: Audit,
    body: MergeRequest | None = None,
) -> MergeResult | JSONResponse:
    workplace = await run_in_threadpool(_of_conversation, context, client_id, conversation_id)
    target = f"conversations:{conversation_id}"
    return await _merge_off_the_pool(request, context, workplace, body, audit, target)


@router.get(
    "/workspace",
    response_model=WorkspaceStatus,
    summary="The workspace: its branch's head and the uncommitted files in its worktree",
)
async def workspace(conversation_id: str, context: Context, client_id: ClientId) -> WorkspaceStatus:
    project, name = await run_in_threadpool(_of_conversation, context, client_id, conversation_id)
    if context.workspaces is None:
        raise Unavailable("workspaces are not available on this gateway")
    spec = workspace_spec(context.settings, client_id, project, name)
    return await context.workspaces.status(spec)


@run_router.get("/branch", response_model=BranchInfo, summary=BRANCH)
def run_branch(run_id: str, context: Context, client_id: ClientId) -> BranchInfo:
    return _branch(_of_run(context, client_id, run_id), run_id=run_id)


@run_router.get("/diff", response_model=BranchDiffOut, summary=DIFF)
def run_diff(run_id: str, context: Context, client_id: ClientId) -> BranchDiffOut:
    return _diff(_of_run(context, client_id, run_id))


@run_router.post("/merge", response_model=MergeResult, summary=MERGE)
async def run_merge(
    run_id: str,
    request: Request,
    context: Context,
    client_id: ClientId,
    audit: Audit,
    body: MergeRequest | None = None,
) -> MergeResult | JSONResponse:
    workplace = await run_in_threadpool(_of_run, context, client_id, run_id)
    target = f"workflow-runs:{run_id}"
    return await _merge_off_the_pool(request, context, workplace, body, audit, target)
