"""Artifacts on real Ray: ``artifact.write`` versions a document in the project's artifacts
repository and indexes it with the memory machinery (the real embedder deployment);
``artifact.search`` finds it by meaning, one hit per artifact; ``artifact.read`` reads any version;
agents of other projects cannot touch it."""

from __future__ import annotations

from cluster import wiring
from core.conversations import create_conversation
from core.projects import create_project
from tests.conftest import Cluster
from tests.factories import make_client
from tests.integration.test_memory_recall import library_task
from tests.integration.test_workspaces import Session, new_agent, new_conversation


def test_write_search_and_read_versions(ray_cluster: Cluster, embedder_app: str) -> None:
    store = ray_cluster.store
    client_id, _ = make_client(store, "artifacts")
    project = create_project(store, ray_cluster.settings, client_id=client_id, name="docs")
    agent = new_agent(store, client_id, [project.id])
    session = Session(ray_cluster, new_conversation(store, agent, project.id), agent.id)
    try:
        first = session.ok(
            "artifact.write",
            path="decisions/auth.md",
            content="# Authentication\nWe use server-side sessions stored in Redis.\n",
        )
        assert first["title"] == "Authentication"
        second = session.ok(
            "artifact.write",
            path="decisions/auth.md",
            content="# Authentication\nWe switched to signed JWT access tokens.\n",
            message="JWT instead of sessions",
        )
        session.ok(
            "artifact.write",
            path="research/caching.md",
            title="Caching study",
            content="Measured the CDN cache hit rate for static images over a week.",
        )

        found = session.ok("artifact.search", query="how do users log in? tokens", k=2)["hits"]
        assert found and found[0]["path"] == "decisions/auth.md", found
        assert len({hit["path"] for hit in found}) == len(found)  # one hit per artifact
        text = session.ok("artifact.search", query="CDN cache", mode="fts", k=5)["hits"]
        assert [hit["path"] for hit in text] == ["research/caching.md"]

        latest = session.ok("artifact.read", path="decisions/auth.md")
        assert "JWT" in latest["content"] and latest["commit"] == second["commit"]
        assert latest["versions"] == [second["commit"], first["commit"]]
        old = session.ok("artifact.read", path="decisions/auth.md", version=first["commit"])
        assert "sessions" in old["content"]

        outsider = new_agent(store, client_id, [])
        code, _ = Session(ray_cluster, session.conversation, outsider.id).error(
            "artifact.read", path="decisions/auth.md"
        )
        assert code == "PERMISSION_DENIED"
        code, _ = session.error("artifact.write", path="../escape.md", content="x")
        assert code == "PERMISSION_DENIED"
    finally:
        wiring.workspaces(ray_cluster.env).stop(session.conversation.id)


def test_code_index_gives_the_model_a_map(ray_cluster: Cluster, embedder_app: str) -> None:
    store = ray_cluster.store
    client_id, _ = make_client(store, "index")
    project = create_project(store, ray_cluster.settings, client_id=client_id, name="indexed")
    agent = new_agent(store, client_id, [project.id])
    session = Session(ray_cluster, new_conversation(store, agent, project.id), agent.id)
    loose = new_agent(store, client_id, [])
    bare = Session(
        ray_cluster, create_conversation(store, client_id=client_id, agent_id=loose.id), loose.id
    )
    task = library_task("code_index")
    tools = [{"name": "repo_read", "description": "Read a file of your worktree."}]
    try:
        session.ok("repo.write", path="src/server.py", content="print('up')\n")
        session.ok("repo.commit", message="Add the server")
        session.ok("artifact.write", path="design.md", content="# Server design\nOne process.\n")
        context = session.run_task(task, {"query": "hi", "tools": tools})["system_context"]
        assert session.conversation.branch in context
        assert "src/server.py" in context and "Add the server" in context
        assert "design.md: Server design" in context and "repo_read:" in context
        empty = bare.run_task(task, {"query": "hi", "tools": tools})["system_context"]
        assert empty == "Tools: repo_read: Read a file of your worktree."
    finally:
        wiring.workspaces(ray_cluster.env).stop(session.conversation.id)
