"""Workspaces across nodes (docs/workspaces.md, "Placement"): a worktree lives on the node whose
actor made it, the store records that node, and an actor made again is pinned there with a hard
node affinity, whichever node asks; when that node is gone, a live node with its address takes
the workspace (Ray restarted on that host, same disk: on this machine every node shares
127.0.0.1 and the disk, so the uncommitted work is found there too).

Each call runs as a tool call would, from a task on a chosen node (``drive("workspace", ...)``,
``tests/cluster/driver.py``); the lost node is this test's own worker, killed at the end.
"""

from __future__ import annotations

import pytest

from cluster.placement import cpu_node_labels
from core.conversations import create_conversation
from core.ids import new_id, utc_now
from core.projects import create_project, start_conversation_branch
from tests.cluster.conftest import MultiNode
from tests.factories import make_agent, make_client, scripted_profile

pytestmark = pytest.mark.timeout(600)

NOTE = "notes.md"


def test_a_workspace_stays_with_the_node_that_holds_its_worktree(multinode: MultiNode) -> None:
    store = multinode.store
    client_id, _ = make_client(store)
    project = create_project(store, multinode.settings, client_id=client_id, name="nodes")
    profile = scripted_profile(store, [{"reply": "ok"}])
    agent = make_agent(store, client_id, profile, project_ids=[project.id])
    conversation_id = new_id("conv")
    create_conversation(
        store,
        client_id=client_id,
        agent_id=agent.id,
        conversation_id=conversation_id,
        project_id=project.id,
        branch=start_conversation_branch(project, conversation_id),
    )
    ids = {"conversation": conversation_id, "agent": agent.id}
    nodes = [multinode.head, *multinode.cpu]

    # Made where Ray put it (a new workspace is placed like any actor off accelerator nodes),
    # and recorded there.
    made = multinode.drive("workspace", **ids, write={NOTE: "uncommitted"})
    home = made["actor_node"]
    assert made["record_node"] == home, made

    # Stopped (as when it idles out) and asked for again by a caller on another node: the hard
    # affinity brings the actor back to its worktree's node, uncommitted file and all.
    elsewhere = next(n.node_id for n in nodes if n.node_id != home)
    again = multinode.drive("workspace", **ids, from_node=elsewhere, stop=True, read=[NOTE])
    assert again["actor_node"] == again["record_node"] == home, again
    assert again["read"] == {NOTE: "uncommitted"}

    # Its node is lost. The test's own worker stands for it: the record says the worktree is
    # there (on this machine's one disk it is the same worktree), so the actor goes there first.
    victim = multinode.nodes.add_worker("workspace-victim", cpu_node_labels())
    record = store.workspaces.get(made["workspace"])
    assert record is not None
    moved_there = record.model_copy(update={"node_id": victim.node_id, "updated_at": utc_now()})
    store.workspaces.put(moved_there)
    there = multinode.drive("workspace", **ids, from_node=elsewhere, stop=True, read=[NOTE])
    assert there["actor_node"] == victim.node_id, there
    victim.kill()
    multinode.nodes.wait_dead(victim)
    # The next call finds a live node with the lost node's address (Ray restarted on that host),
    # and the record moves there.
    moved = multinode.drive("workspace", **ids, from_node=elsewhere, read=[NOTE])
    assert moved["actor_node"] not in (victim.node_id, None), moved
    assert moved["record_node"] == moved["actor_node"], moved
    assert moved["read"] == {NOTE: "uncommitted"}  # the same disk, on this machine
