"""Pure decisions about memories: which fact a new one updates, how episodes are consolidated.

No storage, no clock, no ids: the current time and candidates arrive as arguments.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from ulid import ULID

from core.memory.records import Memory, MemoryEdit, MemoryType

# A new memory of these types replaces an existing one on the same subject (a contradiction is
# resolved by update, not by a duplicate); other types (episodes, notes) always accumulate.
UPDATABLE_TYPES = frozenset({MemoryType.FACT.value, MemoryType.DECISION.value})
DEFAULT_SIMILARITY_THRESHOLD = 0.9
MAX_HISTORY = 5


def update_target(
    memory_type: str,
    same_subject: Sequence[Memory],
    nearest: tuple[Memory, float] | None,
    threshold: float = DEFAULT_SIMILARITY_THRESHOLD,
) -> Memory | None:
    """The existing memory a new one should update, or None to add it.

    Same subject (metadata key the extractor gives facts) wins: the most recently updated such
    memory is updated. Without one, the nearest memory of the same type is updated when its
    relevance (cosine similarity) is at least ``threshold`` — a restatement or a correction.
    """
    if memory_type not in UPDATABLE_TYPES:
        return None
    if same_subject:
        return max(same_subject, key=lambda m: (m.updated_at, m.id))
    if nearest is not None and nearest[1] >= threshold and nearest[0].type == memory_type:
        return nearest[0]
    return None


def history_entry(old: Memory) -> dict[str, object]:
    return {"content": old.content, "updated_at": old.updated_at.isoformat()}


def updated_metadata(old: Memory, new_metadata: dict[str, object]) -> dict[str, object]:
    """The new metadata, carrying a bounded history of what the memory said before."""
    history = list(old.metadata.get("history") or [])[-(MAX_HISTORY - 1) :]
    if old.content:
        history.append(history_entry(old))
    return {**new_metadata, "history": history}


def edited_memory(old: Memory, edit: MemoryEdit, now: datetime, embedding_model: str) -> Memory:
    """``old`` (with its full content) corrected by ``edit``, its content inline (the caller
    externalises it). A changed content is recorded in the metadata's history, like an update by
    a newer fact; ``embedding_model`` is the model of the vector stored with the result."""
    given = edit.model_fields_set
    content = edit.content if edit.content is not None else old.content
    metadata = dict(edit.metadata) if edit.metadata is not None else dict(old.metadata)
    if content != old.content:
        metadata = updated_metadata(old, metadata)
    elif "history" in old.metadata:
        metadata["history"] = old.metadata["history"]
    return old.model_copy(
        update={
            "content": content,
            "content_ref": None,
            "type": edit.type or old.type,
            "significance": (
                edit.significance if edit.significance is not None else old.significance
            ),
            "subject": edit.subject if "subject" in given else old.subject,
            "metadata": metadata,
            "embedding_model": embedding_model,
            "updated_at": now,
        }
    )


# --------------------------------------------------------------------------- consolidation


@dataclass(frozen=True, slots=True)
class ConsolidationGroup:
    """Episodes to fold into one summary, whose id is derived from them (reruns are no-ops)."""

    summary_id: str
    episodes: tuple[Memory, ...]

    @property
    def source_ids(self) -> list[str]:
        return [e.id for e in self.episodes]


def summary_id_for(episodes: Sequence[Memory]) -> str:
    """A deterministic ULID-shaped id: newest source's time + a hash of the source ids."""
    newest = max(e.created_at for e in episodes)
    digest = hashlib.sha256(",".join(sorted(e.id for e in episodes)).encode()).digest()
    millis = int(newest.timestamp() * 1000).to_bytes(6, "big")
    return f"mem_{ULID.from_bytes(millis + digest[:10])}"


def plan_groups(
    episodes: Sequence[Memory],
    now: datetime,
    min_age: timedelta,
    group_size: int,
    min_group: int = 2,
) -> list[ConsolidationGroup]:
    """Fold unconsolidated episodes older than ``min_age`` in chronological groups.

    Groups are consecutive runs of ``group_size`` (the last may be shorter, never under
    ``min_group``), so the same input always gives the same groups and summary ids.
    """
    old = sorted(
        (e for e in episodes if e.consolidated_into is None and now - e.created_at >= min_age),
        key=lambda e: (e.created_at, e.id),
    )
    groups: list[ConsolidationGroup] = []
    for start in range(0, len(old), max(group_size, 1)):
        chunk = tuple(old[start : start + group_size])
        if len(chunk) >= min_group:
            groups.append(ConsolidationGroup(summary_id_for(chunk), chunk))
    return groups


def unfinished_groups(
    summaries: Sequence[Memory], unconsolidated_ids: set[str]
) -> list[tuple[str, list[str]]]:
    """Summaries written by an interrupted run whose sources were never marked: (summary, ids)."""
    out: list[tuple[str, list[str]]] = []
    for summary in summaries:
        sources = [str(s) for s in summary.metadata.get("sources") or []]
        pending = [s for s in sources if s in unconsolidated_ids]
        if summary.metadata.get("consolidation") and pending:
            out.append((summary.id, pending))
    return out


_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def first_sentence(text: str, limit: int = 300) -> str:
    sentence = _SENTENCE.split(text.strip(), maxsplit=1)[0].strip()
    return sentence if len(sentence) <= limit else sentence[: limit - 1].rstrip() + "…"


def extractive_summary(episodes: Sequence[tuple[Memory, str]], max_chars: int = 2000) -> str:
    """A deterministic summary: the first sentence of the most significant episodes, in time order.

    Used when no model profile is given; a model-written summary replaces it otherwise.
    """
    if not episodes:
        return ""
    by_importance = sorted(episodes, key=lambda e: (-e[0].significance, e[0].created_at, e[0].id))
    chosen: list[tuple[Memory, str]] = []
    used = 0
    for memory, content in by_importance:
        sentence = first_sentence(content)
        if not sentence or used + len(sentence) + 1 > max_chars:
            continue
        chosen.append((memory, sentence))
        used += len(sentence) + 1
    chosen.sort(key=lambda e: (e[0].created_at, e[0].id))
    start = min(m.created_at for m, _ in episodes).date().isoformat()
    end = max(m.created_at for m, _ in episodes).date().isoformat()
    header = f"Summary of {len(episodes)} episodes ({start} to {end}):"
    return " ".join([header, *(sentence for _, sentence in chosen)])


def plan_fact_merges(facts: Sequence[Memory]) -> list[tuple[str, list[str]]]:
    """Facts that share a subject (two writers raced): the newest survives, the rest fold into it.

    Returns ``(survivor_id, [folded ids])`` per subject with duplicates.
    """
    by_subject: dict[tuple[str, str], list[Memory]] = {}
    for fact in facts:
        if fact.subject and fact.consolidated_into is None and fact.type in UPDATABLE_TYPES:
            by_subject.setdefault((fact.type, fact.subject), []).append(fact)
    merges: list[tuple[str, list[str]]] = []
    for key in sorted(by_subject):
        group = sorted(by_subject[key], key=lambda m: (m.updated_at, m.id))
        if len(group) > 1:
            merges.append((group[-1].id, [m.id for m in group[:-1]]))
    return merges
