"""Storage of registered MCP servers, one row per client and server id (``core.mcp``)."""

from __future__ import annotations

from sqlalchemy import delete, insert, select

from core.errors import NotFound
from core.mcp import McpServer
from core.store import schema
from core.store.database import Database


class McpServerOps:
    def __init__(self, db: Database) -> None:
        self.db = db

    def save(self, server: McpServer) -> McpServer:
        t = schema.mcp_servers
        with self.db.begin() as conn:
            conn.execute(delete(t).where(t.c.client_id == server.client_id, t.c.id == server.id))
            conn.execute(
                insert(t).values(
                    client_id=server.client_id, id=server.id, data=server.model_dump_json()
                )
            )
        return server

    def find(self, client_id: str, server_id: str) -> McpServer | None:
        t = schema.mcp_servers
        query = select(t.c.data).where(t.c.client_id == client_id, t.c.id == server_id)
        with self.db.connect() as conn:
            found = conn.execute(query).scalar_one_or_none()
        return None if found is None else McpServer.model_validate_json(found)

    def get(self, client_id: str, server_id: str) -> McpServer:
        found = self.find(client_id, server_id)
        if found is None:
            raise NotFound(f"MCP server {server_id} not found")
        return found

    def list(self, client_id: str) -> list[McpServer]:
        t = schema.mcp_servers
        query = select(t.c.data).where(t.c.client_id == client_id).order_by(t.c.id)
        with self.db.connect() as conn:
            return [McpServer.model_validate_json(r) for r in conn.execute(query).scalars()]

    def delete(self, client_id: str, server_id: str) -> bool:
        t = schema.mcp_servers
        with self.db.begin() as conn:
            done = conn.execute(delete(t).where(t.c.client_id == client_id, t.c.id == server_id))
        return bool(done.rowcount)
