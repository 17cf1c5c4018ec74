"""How a run whose coordinator was lost continues on a re-created coordinator. Pure.

What survives the coordinator is what the store holds: the run row and one history record per
token, written in one transaction per planning batch *before* the batch's effects (a dispatched
task is recorded ``waiting_for_task``, a subworkflow's child run id before the child starts). The
records carry everything planning knows (``records.restored_state`` rebuilds the state from them),
so the run picks up where its last batch left it:

- a token that is ``done``, ``failed`` or ``cancelled`` stays so: a completed node never runs again;
- a task node whose work was out is run again only when its task is declared ``idempotent``
  (``TaskDef.idempotent``, the same rule as a conversation's tools); otherwise the token fails with
  an ``interrupted`` error that is not retried (the task may or may not have taken effect), and the
  failure flows along the graph as any failed node's does (``on_failure``: the run fails, or the
  branch is dropped);
- a subworkflow node re-attaches to the child run it recorded (started then, if the lost
  coordinator died before it could start it);
- an agent node asks its conversation again with the same message id (derived from the run,
  token and attempt), which answers with the outcome of the turn that message started instead of
  starting a second turn;
- a token created but not yet dispatched is activated as usual.

A run is resumed at most ``MAX_RESUMPTIONS`` times; the next loss fails it with a clear reason.
"""

from __future__ import annotations

from actors.workflow_coordinator.domain import NodeError
from core.errors import ErrorCode

MAX_RESUMPTIONS = 3
RESUMED_EVENT = "workflow_resumed"  # the run event each resumption records (and is counted by)


def interrupted_task(task_id: str) -> NodeError:
    """The failure of a task node whose coordinator was lost while the task ran."""
    message = (
        f"interrupted: the coordinator was lost while task {task_id} ran, so the task may or may "
        "not have taken effect; it is not run again because it is not declared idempotent"
    )
    return NodeError(ErrorCode.EXECUTION_FAILED, message, retriable=False)


def too_many_resumptions(resumption: int) -> NodeError:
    """Why a run whose coordinator keeps being lost fails."""
    message = (
        f"interrupted: the coordinator was lost {resumption} times "
        f"(a run is resumed at most {MAX_RESUMPTIONS} times)"
    )
    return NodeError(ErrorCode.EXECUTION_FAILED, message, retriable=True)


def agent_call_ids(run_id: str, token_id: str, attempt: int) -> tuple[str, str]:
    """The message id of an agent node's call, and the id of its delegate conversation.

    Derived, not drawn: a resumed coordinator asks again with the same ids, so the conversation
    answers with the turn that message started (and a delegate's child conversation is the same).
    """
    suffix = f"{run_id}-{token_id}-{attempt}"
    return f"msg_{suffix}", f"conv_{suffix}"
