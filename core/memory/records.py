"""The memory record of ARCHITECTURE.md §3 and the shapes that go in and out of the memory store.

A memory belongs to one agent. Content up to ``INLINE_LIMIT_BYTES`` (UTF-8) is stored inline; larger
content goes to the object store under ``<agent_id>/<memory_id>`` and the row keeps ``content=""``
and ``content_ref`` (the object key). Episodes folded into a summary keep their row (and vector) but
point ``consolidated_into`` at the summary and move their content to the object store.
"""

from __future__ import annotations

import json
from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, model_validator

from core.jsontypes import JsonObject

INLINE_LIMIT_BYTES = 4096
MAX_CONTENT_BYTES = 1024 * 1024  # one memory is at most 1 MiB, inline or not
MAX_METADATA_BYTES = 16 * 1024
MAX_SEARCH_K = 100


class MemoryType(StrEnum):
    """The types the default library uses; libraries may define their own (any short name)."""

    FACT = "fact"
    DECISION = "decision"
    EPISODE = "episode"
    SUMMARY = "summary"
    NOTE = "note"


class SearchMode(StrEnum):
    VECTOR = "vector"
    FTS = "fts"
    HYBRID = "hybrid"


class Memory(BaseModel):
    """A stored memory (one LanceDB row, without its vector)."""

    model_config = ConfigDict(extra="forbid")

    id: str
    agent_id: str
    type: str
    content: str = ""
    content_ref: str | None = None
    significance: float = Field(0.5, ge=0.0, le=1.0)
    metadata: JsonObject = Field(default_factory=dict)
    subject: str | None = None
    embedding_model: str = ""
    created_at: datetime
    updated_at: datetime
    consolidated_into: str | None = None

    @property
    def is_inline(self) -> bool:
        return self.content_ref is None


class NewMemory(BaseModel):
    """What a writer supplies; the store assigns id and timestamps and embeds the content."""

    model_config = ConfigDict(extra="forbid")

    type: str = Field(MemoryType.NOTE.value, pattern=r"^[a-z][a-z0-9_]{0,31}$")
    content: str = Field(min_length=1)
    significance: float = Field(0.5, ge=0.0, le=1.0)
    metadata: JsonObject = Field(default_factory=dict)
    subject: str | None = Field(
        None, max_length=200, description="Key for facts: a newer fact on it updates the old one"
    )


class MemoryEdit(BaseModel):
    """A correction to a stored memory: the fields given change, the others stay (``null`` keeps
    a field, except ``subject``, which it clears). A new ``content`` is embedded again (searches
    find the new text); ``metadata`` replaces the memory's metadata (its history of earlier
    contents is kept)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"minProperties": 1})

    content: str | None = Field(None, min_length=1, description="The corrected text")
    type: str | None = Field(None, pattern=r"^[a-z][a-z0-9_]{0,31}$")
    significance: float | None = Field(None, ge=0.0, le=1.0)
    subject: str | None = Field(None, max_length=200, description="null clears the subject")
    metadata: JsonObject | None = Field(None, description="Replaces the metadata")

    @model_validator(mode="after")
    def _names_a_change(self) -> MemoryEdit:
        if not self.model_fields_set:
            raise ValueError("an edit changes at least one of: " + ", ".join(EDITABLE_FIELDS))
        if self.metadata is not None and len(json.dumps(self.metadata)) > MAX_METADATA_BYTES:
            raise ValueError(f"metadata over {MAX_METADATA_BYTES} bytes")
        return self


EDITABLE_FIELDS = ("content", "type", "significance", "subject", "metadata")


class RankWeights(BaseModel):
    """``score = relevance * relevance_weight + significance * significance_weight``."""

    model_config = ConfigDict(extra="forbid")

    relevance: float = Field(0.6, ge=0.0, le=10.0)
    significance: float = Field(0.4, ge=0.0, le=10.0)


class MemoryHit(BaseModel):
    """A search result: the memory, how relevant it is to the query (0..1) and its final score."""

    model_config = ConfigDict(extra="forbid")

    memory: Memory
    relevance: float
    score: float


class WriteOutcome(BaseModel):
    """What ``write`` did: ``created`` a new memory or ``updated`` an existing one (same subject or
    a near-duplicate fact)."""

    model_config = ConfigDict(extra="forbid")

    memory: Memory
    action: str = Field(pattern=r"^(created|updated)$")
