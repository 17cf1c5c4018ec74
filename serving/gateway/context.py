"""What the gateway's routes work with: the store, and ports to conversations, workflow runs and
memories (``core.ports``). ``cluster`` builds the context with Ray adapters inside each replica;
tests without Ray pass fakes with the same interfaces.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from starlette.requests import HTTPConnection

from core.mcp import McpTools
from core.ports import (
    ChatModels,
    ClusterView,
    Conversations,
    MemoryAccess,
    PromptTokenizers,
    ServedModels,
    WorkflowRuns,
    Workspaces,
)
from core.settings import Settings, settings_from_env
from core.store import Store


@dataclass(frozen=True)
class GatewayContext:
    """Everything a request handler needs, built once per replica."""

    store: Store
    conversations: Conversations
    workflows: WorkflowRuns
    memory: MemoryAccess
    settings_env: dict[str, str] = field(default_factory=dict)
    workspaces: Workspaces | None = None
    node: str = ""  # the Ray node this replica runs on (``X-Wonder-Node`` of a stream's handshake)
    models: ServedModels | None = None  # what the local model answers to (model profile PUTs)
    mcp: McpTools | None = None  # connections to the clients' MCP servers (``core.mcp``)
    chat_models: ChatModels | None = None  # the models a replayed call is sent to (playground)
    cluster: ClusterView | None = None  # what operators see of the cluster (/v1/operations)
    tokenizers: PromptTokenizers | None = None  # the local model's counts (context-window view)

    @property
    def settings(self) -> Settings:
        """This replica's settings (parsed once per distinct environment)."""
        return settings_from_env(self.settings_env)


def get_context(connection: HTTPConnection) -> GatewayContext:
    """FastAPI dependency: the context of the app serving this request or WebSocket."""
    context: GatewayContext = connection.app.state.gateway
    return context
