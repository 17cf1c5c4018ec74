"""Storage of model call records, spans, turn traces and turn links (docs/observability.md).

Storage only: the background writer (``core.record_sink``) batches rows into ``insert_*``; the
gateway reads them back. Writes here never touch a conversation's events.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Select, and_, case, delete, func, insert, or_, select
from sqlalchemy.exc import IntegrityError

from core.model_calls import ModelCallRecord, TurnLink, UsageTotals
from core.store import schema
from core.store.ops_base import StoreOps
from core.trace_records import SpanRecord

MAX_LISTED = 1000


def _ts(value: datetime) -> str:
    return value.isoformat()


class TurnTrace:
    """The trace a turn joined (``turn_traces``)."""

    def __init__(self, trace_id: str, parent_span_id: str | None) -> None:
        self.trace_id = trace_id
        self.parent_span_id = parent_span_id


class RecordOps(StoreOps):
    """``store.records``: model calls, spans, turn traces and links."""

    # ------------------------------------------------------------------ writes

    def insert_calls(self, records: Sequence[ModelCallRecord], conn: Connection) -> None:
        if not records:
            return
        conn.execute(insert(schema.model_calls), [_call_row(r) for r in records])

    def insert_spans(self, spans: Sequence[SpanRecord], conn: Connection) -> None:
        """Spans; one recorded twice (a replayed report) is kept once."""
        rows = [_span_row(s) for s in spans]
        if not rows:
            return
        try:
            with conn.begin_nested():
                conn.execute(insert(schema.spans), rows)
        except IntegrityError:
            for row in rows:
                try:
                    with conn.begin_nested():
                        conn.execute(insert(schema.spans).values(**row))
                except IntegrityError:
                    continue

    def insert_links(self, links: Sequence[TurnLink], conn: Connection) -> None:
        """Links; one already there (the same turn, kind and target) is kept as it was."""
        for link in links:
            try:
                with conn.begin_nested():
                    conn.execute(insert(schema.turn_links).values(**_link_row(link)))
            except IntegrityError:
                continue

    def put_trace(
        self,
        turn_id: str,
        trace_id: str,
        parent_span_id: str | None,
        conn: Connection | None = None,
    ) -> None:
        """The trace ``turn_id`` joins (the first one recorded wins)."""
        t = schema.turn_traces
        with self._write(conn) as c:
            found = c.execute(select(t.c.turn_id).where(t.c.turn_id == turn_id)).first()
            if found is None:
                c.execute(
                    insert(t).values(
                        turn_id=turn_id, trace_id=trace_id, parent_span_id=parent_span_id
                    )
                )

    # ------------------------------------------------------------------ reads

    def trace_of(self, turn_id: str) -> TurnTrace | None:
        t = schema.turn_traces
        with self._read() as c:
            row = c.execute(
                select(t.c.trace_id, t.c.parent_span_id).where(t.c.turn_id == turn_id)
            ).first()
        return None if row is None else TurnTrace(str(row[0]), row[1])

    def call(self, call_id: str) -> ModelCallRecord | None:
        t = schema.model_calls
        with self._read() as c:
            data = c.execute(select(t.c.data).where(t.c.id == call_id)).scalar_one_or_none()
        return None if data is None else ModelCallRecord.model_validate_json(data)

    def calls(
        self,
        *,
        turn_ids: Sequence[str] | None = None,
        conversation_id: str | None = None,
        run_id: str | None = None,
        node_id: str | None = None,
        limit: int = MAX_LISTED,
    ) -> list[ModelCallRecord]:
        """Calls in the order they were made."""
        t = schema.model_calls
        query = select(t.c.data).order_by(t.c.created_at, t.c.id).limit(limit)
        if turn_ids is not None:
            query = query.where(t.c.turn_id.in_(list(turn_ids)))
        if conversation_id is not None:
            query = query.where(t.c.conversation_id == conversation_id)
        if run_id is not None:
            query = query.where(t.c.run_id == run_id)
        if node_id is not None:
            query = query.where(t.c.node_id == node_id)
        with self._read() as c:
            return [ModelCallRecord.model_validate_json(d) for d in c.execute(query).scalars()]

    def usage(
        self,
        *,
        client_id: str,
        turn_ids: Sequence[str] | None = None,
        conversation_ids: Sequence[str] | None = None,
        agent_id: str | None = None,
        since: datetime | None = None,
    ) -> UsageTotals:
        """The summed calls of the client (narrowed to turns, conversations, an agent)."""
        t = schema.model_calls
        query: Select[Any] = select(
            func.count(),
            func.sum(case((t.c.status == "error", 1), else_=0)),
            func.coalesce(func.sum(t.c.prompt_tokens), 0),
            func.coalesce(func.sum(t.c.completion_tokens), 0),
            func.coalesce(func.sum(t.c.cost), 0.0),
            func.count(func.distinct(t.c.currency)),
            func.max(t.c.currency),
        ).where(t.c.client_id == client_id)
        if turn_ids is not None:
            query = query.where(t.c.turn_id.in_(list(turn_ids)))
        if conversation_ids is not None:
            query = query.where(t.c.conversation_id.in_(list(conversation_ids)))
        if agent_id is not None:
            query = query.where(t.c.agent_id == agent_id)
        if since is not None:
            query = query.where(t.c.created_at >= _ts(since))
        with self._read() as c:
            row = c.execute(query).one()
        currencies, currency = int(row[5] or 0), row[6]
        return UsageTotals(
            calls=int(row[0] or 0),
            failed_calls=int(row[1] or 0),
            prompt_tokens=int(row[2] or 0),
            completion_tokens=int(row[3] or 0),
            cost=round(float(row[4] or 0.0), 6),
            currency=str(currency) if currencies == 1 and currency else None,
        )

    def totals_since(self, since: datetime) -> UsageTotals:
        """Every client's calls since ``since`` summed: calls, failures, tokens (operators: the
        models' throughput; no cost, which is in each client's own currency)."""
        t = schema.model_calls
        query = select(
            func.count(),
            func.sum(case((t.c.status == "error", 1), else_=0)),
            func.coalesce(func.sum(t.c.prompt_tokens), 0),
            func.coalesce(func.sum(t.c.completion_tokens), 0),
        ).where(t.c.created_at >= _ts(since))
        with self._read() as c:
            row = c.execute(query).one()
        return UsageTotals(
            calls=int(row[0] or 0),
            failed_calls=int(row[1] or 0),
            prompt_tokens=int(row[2] or 0),
            completion_tokens=int(row[3] or 0),
        )

    def spans(self, trace_id: str, limit: int = 5000) -> list[SpanRecord]:
        t = schema.spans
        query = select(t.c.data).where(t.c.trace_id == trace_id).order_by(t.c.started_at)
        with self._read() as c:
            rows = c.execute(query.limit(limit)).scalars()
            return [SpanRecord.model_validate_json(d) for d in rows]

    def links(self, turn_id: str) -> list[TurnLink]:
        t = schema.turn_links
        query = select(t.c.data).where(t.c.turn_id == turn_id).order_by(t.c.at, t.c.kind)
        with self._read() as c:
            return [TurnLink.model_validate_json(d) for d in c.execute(query).scalars()]

    # ------------------------------------------------------------------ retention

    def expired_refs(self, before: datetime, limit: int = 1000) -> list[str]:
        """Object keys of the request/response bodies of calls made before ``before``."""
        t = schema.model_calls
        query = (
            select(t.c.data)
            .where(and_(t.c.created_at < _ts(before), t.c.data.like('%"request_ref":"%')))
            .limit(limit)
        )
        keys: list[str] = []
        with self._read() as c:
            for data in c.execute(query).scalars():
                record = json.loads(data)
                keys += [k for k in (record.get("request_ref"), record.get("response_ref")) if k]
        return keys

    def prune(self, before: datetime) -> tuple[int, int]:
        """Delete calls and spans made before ``before``; returns how many of each."""
        calls, spans = schema.model_calls, schema.spans
        with self.db.begin() as c:
            gone_calls = c.execute(delete(calls).where(calls.c.created_at < _ts(before)))
            gone_spans = c.execute(delete(spans).where(spans.c.started_at < _ts(before)))
        return int(gone_calls.rowcount or 0), int(gone_spans.rowcount or 0)

    def conversation_spans(self, conversation_id: str, turn_ids: Sequence[str]) -> list[SpanRecord]:
        """Spans recorded for a conversation's turns (what an export bundle carries)."""
        t = schema.spans
        query = select(t.c.data).where(
            or_(t.c.conversation_id == conversation_id, t.c.turn_id.in_(list(turn_ids)))
        )
        with self._read() as c:
            return [SpanRecord.model_validate_json(d) for d in c.execute(query).scalars()]


def _call_row(record: ModelCallRecord) -> dict[str, Any]:
    source = record.source
    return {
        "id": record.id,
        "client_id": source.client_id,
        "conversation_id": source.conversation_id,
        "turn_id": source.turn_id,
        "agent_id": source.agent_id,
        "run_id": source.run_id,
        "node_id": source.node_id,
        "status": record.status,
        "prompt_tokens": record.usage.prompt_tokens,
        "completion_tokens": record.usage.completion_tokens,
        "cost": record.cost,
        "currency": record.currency,
        "created_at": _ts(record.created_at),
        "data": record.model_dump_json(),
    }


def _span_row(span: SpanRecord) -> dict[str, Any]:
    return {
        "trace_id": span.trace_id,
        "span_id": span.span_id,
        "parent_span_id": span.parent_span_id,
        "conversation_id": span.conversation_id,
        "turn_id": span.turn_id,
        "name": span.name[:200],
        "started_at": _ts(span.start),
        "data": span.model_dump_json(),
    }


def _link_row(link: TurnLink) -> dict[str, Any]:
    return {
        "turn_id": link.turn_id,
        "kind": link.kind,
        "target_id": link.target_id[:200],
        "conversation_id": link.conversation_id,
        "at": _ts(link.at),
        "data": link.model_dump_json(),
    }
