"""Pure graph traversal: ``plan(state, event) -> list[Decision]``.

Rules: no Ray, no storage, no clock, no randomness. Time arrives in the event; token ids are
``t<seq>`` and group ids ``g<seq of the token that fanned out>``, both derived from the state, so
replaying the same events gives the same decisions.

Theory of operation
-------------------
Every decision is also a state transition, applied by ``apply`` (the shell applies the returned
decisions to its own state the same way). ``plan`` works on a copy, emitting and applying one
decision at a time, so later steps of a cascade see earlier ones.

An event makes one token move: a start creates the start tokens, a result completes a token, a
failure retries it, drops it (``on_failure: drop``) or fails the run. A completed token *advances*:
its node's edges are tested, each matching edge enters its target node. Entering a node creates a
token and *activates* it (compute the node input, then dispatch it, or complete it at once for a
``pass`` node) — except entering a join node from inside a fan-out, which records an *arrival* for
the innermost group instead. After the work queue drains, groups touched by this event are
*settled*: an any/n join fires as soon as enough branches arrived, an ``all`` join once no branch of
its group has a live token. Firing creates the join token (parent: the token that fanned out) and
cancels stragglers. The run completes when no token is live.

A re-run from a node (``rerun``) is planned like any run, except that activating a token on a
node the chosen node cannot reach completes it at once with the original run's recorded output
(``CompleteToken.reused_from``) instead of dispatching it.

A re-created coordinator rebuilds the state from the store (``resumption.restored_state``) and
plans ``RunResumed``: each token whose work was out is dispatched again or failed, by the rules of
``resumption`` (completed nodes are never run again), then the run goes on as before.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any, assert_never

from actors.workflow_coordinator.domain import (
    BranchStep,
    CallAgent,
    CancelRun,
    CancelToken,
    CompleteRun,
    CompleteToken,
    CreateGroup,
    CreateToken,
    Decision,
    DispatchTask,
    FailRun,
    FailToken,
    FireJoin,
    Group,
    JoinState,
    NodeError,
    NodeFailed,
    NodeSucceeded,
    RecordArrival,
    ResumeRun,
    RunCancelled,
    RunResumed,
    RunStarted,
    RunState,
    StartRun,
    StartSubworkflow,
    Token,
    TokenState,
    WorkflowEvent,
    fanout_group_id,
)
from actors.workflow_coordinator.rerun import VisitKey
from actors.workflow_coordinator.resumption import (
    MAX_RESUMPTIONS,
    interrupted_task,
    too_many_resumptions,
)
from core.jsontypes import JsonObject
from core.workflows import Edge, Node, RunStatus, apply_mapping, evaluate, resolve_ref

INVALID_INPUT = "INVALID_INPUT"
EXECUTION_FAILED = "EXECUTION_FAILED"
CANCELLED = "CANCELLED"


def plan(state: RunState, event: WorkflowEvent) -> list[Decision]:
    """The decisions that ``event`` calls for in ``state`` (``state`` itself is not changed)."""
    planner = _Planner(state.copy(), event.at)
    match event:
        case RunStarted():
            planner.start()
        case NodeSucceeded():
            planner.succeeded(event.token_id, event.output)
        case NodeFailed():
            planner.failed(event.token_id, event.error)
        case RunCancelled():
            planner.cancel(event.reason)
        case RunResumed():
            planner.resume(event.resumption, event.idempotent_nodes)
        case _:
            assert_never(event)
    return planner.decisions


def apply(state: RunState, decision: Decision) -> None:
    """Apply one decision's state transition to ``state`` in place."""
    match decision:
        case StartRun() | CompleteRun() | FailRun() | CancelRun() | ResumeRun():
            _apply_to_run(state, decision)
        case CreateToken(token=token):
            state.tokens[token.id] = token
            if token.state.live:
                state.live.add(token.id)
            state.next_seq = max(state.next_seq, token.seq + 1)
        case CreateGroup(group=group):
            state.groups[group.id] = group
        case RecordArrival():
            join = _join_state(state, decision.node_id, decision.group_id)
            join.arrivals[decision.index] = decision.output
        case FireJoin():
            _join_state(state, decision.node_id, decision.group_id).fired = True
        case DispatchTask() | StartSubworkflow() | CallAgent():
            _set_token(
                state,
                decision.token_id,
                state=_WAITING[type(decision)],
                input=decision.input,
                attempt=decision.attempt,
            )
        case CompleteToken():
            _end_token(
                state,
                decision.token_id,
                TokenState.DONE,
                decision.at,
                input=decision.input,
                output=decision.output,
                reused_from=decision.reused_from,
            )
        case FailToken():
            _end_token(
                state, decision.token_id, TokenState.FAILED, decision.at, error=decision.error
            )
        case CancelToken():
            _end_token(state, decision.token_id, TokenState.CANCELLED, decision.at)
        case _:
            assert_never(decision)


def _apply_to_run(
    state: RunState, decision: StartRun | CompleteRun | FailRun | CancelRun | ResumeRun
) -> None:
    match decision:
        case StartRun():
            state.status = RunStatus.RUNNING
        case CompleteRun():
            state.status = RunStatus.COMPLETED
            state.output = decision.output
        case FailRun():
            state.status = RunStatus.FAILED
            state.error = decision.error
            if decision.node_id and decision.token_id:
                state.failed_node = (decision.node_id, decision.token_id)
        case CancelRun():
            state.status = RunStatus.CANCELLED
            state.error = NodeError(CANCELLED, decision.reason)
        case ResumeRun():
            pass  # recorded on the run by the shell; the tokens move by their own decisions
        case _:
            assert_never(decision)


_WAITING = {
    DispatchTask: TokenState.WAITING_FOR_TASK,
    StartSubworkflow: TokenState.WAITING_FOR_SUBWORKFLOW,
    CallAgent: TokenState.WAITING_FOR_AGENT,
}


def _join_state(state: RunState, node_id: str, group_id: str) -> JoinState:
    key = (node_id, group_id)
    if key not in state.joins:
        state.joins[key] = JoinState(node_id, group_id)
    return state.joins[key]


def _set_token(run: RunState, token_id: str, **changes: Any) -> None:
    run.tokens[token_id] = replace(run.tokens[token_id], **changes)


def _end_token(
    run: RunState, token_id: str, final: TokenState, at: datetime, **changes: Any
) -> None:
    _set_token(run, token_id, state=final, finished_at=at, **changes)
    run.live.discard(token_id)


# --------------------------------------------------------------------------- scopes


class _NodesView(Mapping[str, Any]):
    """``nodes.<id>``: the output of the nearest done ancestor token that ran node ``id``."""

    def __init__(self, tokens: Mapping[str, Token], start: Token | None) -> None:
        self._tokens = tokens
        self._start = start

    def _chain(self) -> Iterator[Token]:
        current = self._start
        while current is not None:
            yield current
            current = self._tokens.get(current.parent_id) if current.parent_id else None

    def __getitem__(self, node_id: str) -> Any:
        for token in self._chain():
            if token.node_id == node_id and token.state is TokenState.DONE:
                return token.output
        raise KeyError(node_id)

    def __iter__(self) -> Iterator[str]:
        seen: list[str] = []
        for token in self._chain():
            if token.state is TokenState.DONE and token.node_id not in seen:
                seen.append(token.node_id)
        return iter(seen)

    def __len__(self) -> int:
        return sum(1 for _ in self)


def latest_outputs(state: RunState) -> dict[str, Any]:
    """Each node's output from its most recent done token (the run-level ``nodes`` scope)."""
    out: dict[str, Any] = {}
    for token in sorted(state.tokens.values(), key=lambda t: t.seq):
        if token.state is TokenState.DONE:
            out[token.node_id] = token.output
    return out


# --------------------------------------------------------------------------- the planner


class _Planner:
    def __init__(self, state: RunState, at: datetime) -> None:
        self.state = state
        self.at = at
        self.graph = state.graph
        self.decisions: list[Decision] = []
        self.work: deque[tuple[str, str]] = deque()  # ("activate" | "advance", token_id)
        self.dirty_groups: set[str] = set()

    # ---- plumbing

    def emit(self, decision: Decision) -> None:
        apply(self.state, decision)
        self.decisions.append(decision)

    @property
    def running(self) -> bool:
        return self.state.status is RunStatus.RUNNING

    def token(self, token_id: str) -> Token:
        return self.state.tokens[token_id]

    def scope(self, token: Token, **extra: Any) -> dict[str, Any]:
        parent = self.state.tokens.get(token.parent_id) if token.parent_id else None
        nodes_from = token if token.state is TokenState.DONE else parent
        return {
            "input": self.state.input,
            "run_id": self.state.run_id,
            "nodes": _NodesView(self.state.tokens, nodes_from),
            "previous": parent.output if parent else None,
            "item": token.item,
            "index": token.index,
            "branches": list(token.branches) if token.branches is not None else None,
            **extra,
        }

    # ---- entry points

    def start(self) -> None:
        if self.state.status is not RunStatus.PENDING:
            return
        self.emit(StartRun(self.at))
        for node_id in self.graph.definition.start_nodes():
            self.enter(node_id, parent=None, branch=(), item=None, index=None)
        self.drain()

    def succeeded(self, token_id: str, output: Any) -> None:
        token = self.state.tokens.get(token_id)
        if token is None or not token.state.live or not self.running:
            return  # a late result for a cancelled token or a finished run
        self.finish_token(token, output)
        self.drain()

    def failed(self, token_id: str, error: NodeError) -> None:
        token = self.state.tokens.get(token_id)
        if token is None or not token.state.live or not self.running:
            return
        node = self.graph.node(token.node_id)
        if error.retriable and token.attempt < node.retry.max_attempts:
            delay = node.retry.backoff_ms * 2 ** (token.attempt - 1)
            self.dispatch(token, node, token.input, token.attempt + 1, delay)
        else:
            self.fail_token(token, error)
        self.drain()

    def cancel(self, reason: str) -> None:
        if self.state.status.terminal:
            return
        self.cancel_live(lambda _t: True)
        self.emit(CancelRun(reason, self.at))

    def resume(self, resumption: int, idempotent_nodes: frozenset[str]) -> None:
        """Take over a running run whose coordinator was lost (see ``resumption``)."""
        if not self.running:
            return
        if resumption > MAX_RESUMPTIONS:
            self.fail_run(too_many_resumptions(resumption))
            return
        self.emit(ResumeRun(resumption, self.at))
        for token_id in sorted(self.state.live, key=lambda t: self.token(t).seq):
            token = self.token(token_id)
            if not (self.running and token.state.live):
                continue  # ended meanwhile: a failure above failed the run, or a join fired
            node = self.graph.node(token.node_id)
            match token.state:
                case TokenState.RUNNING:  # created, its work not yet out: nothing ran
                    self.work.append(("activate", token.id))
                case TokenState.WAITING_FOR_TASK if node.id in idempotent_nodes:
                    self.dispatch(token, node, token.input, token.attempt, 0)
                case TokenState.WAITING_FOR_TASK:
                    self.fail_token(token, interrupted_task(node.target_id or node.id))
                case TokenState.WAITING_FOR_SUBWORKFLOW | TokenState.WAITING_FOR_AGENT:
                    self.dispatch(token, node, token.input, token.attempt, 0, reattach=True)
                case TokenState.DONE | TokenState.FAILED | TokenState.CANCELLED:
                    raise AssertionError(f"token {token.id} is live in state {token.state}")
                case _:
                    assert_never(token.state)
        self.drain()

    # ---- the work loop

    def drain(self) -> None:
        while self.running:
            while self.work and self.running:
                kind, token_id = self.work.popleft()
                if kind == "activate":
                    self.activate(self.token(token_id))
                else:
                    self.advance(self.token(token_id))
            if not (self.running and self.settle()):
                break
        self.finish_if_idle()

    def finish_if_idle(self) -> None:
        if not self.running or self.state.live:
            return
        definition = self.graph.definition
        if definition.output_mapping is not None:
            scope = {
                "input": self.state.input,
                "run_id": self.state.run_id,
                "nodes": latest_outputs(self.state),
            }
            output: Any = apply_mapping(definition.output_mapping, scope)
        else:
            output = self.leaf_outputs()
        self.emit(CompleteRun(output, self.at))

    def leaf_outputs(self) -> Any:
        """Outputs of done tokens on nodes without outgoing edges (one leaf: its output)."""
        leaves = [
            t
            for t in sorted(self.state.tokens.values(), key=lambda t: t.seq)
            if t.state is TokenState.DONE and not self.graph.outgoing(t.node_id)
        ]
        if len(leaves) == 1:
            return leaves[0].output
        grouped: dict[str, list[Any]] = {}
        for leaf in leaves:
            grouped.setdefault(leaf.node_id, []).append(leaf.output)
        return {k: v[0] if len(v) == 1 else v for k, v in grouped.items()} or None

    # ---- tokens

    def new_token(
        self,
        node_id: str,
        parent: Token | None,
        branch: tuple[BranchStep, ...],
        item: Any,
        index: int | None,
        branches: tuple[Any, ...] | None = None,
        from_foreach: bool = False,
    ) -> Token | None:
        seq = self.state.next_seq
        if seq > self.graph.definition.max_tokens:
            limit = self.graph.definition.max_tokens
            self.fail_run(NodeError(EXECUTION_FAILED, f"run exceeded max_tokens ({limit})"))
            return None
        token = Token(
            id=f"t{seq}",
            seq=seq,
            node_id=node_id,
            state=TokenState.RUNNING,
            created_at=self.at,
            parent_id=parent.id if parent else None,
            branch=branch,
            item=item,
            index=index,
            branches=branches,
            from_foreach=from_foreach,
        )
        self.emit(CreateToken(token))
        self.work.append(("activate", token.id))
        return token

    def node_input(self, token: Token, node: Node) -> JsonObject:
        scope = self.scope(token)
        if node.input_mapping is not None:
            return apply_mapping(node.input_mapping, scope)
        if token.branches is not None:
            return {"branches": list(token.branches)}
        parent = self.state.tokens.get(token.parent_id) if token.parent_id else None
        if parent is None:
            return dict(self.state.input)
        if token.from_foreach:
            return (
                dict(token.item)
                if isinstance(token.item, dict)
                else {"item": token.item, "index": token.index}
            )
        return dict(parent.output) if isinstance(parent.output, dict) else {"value": parent.output}

    def activate(self, token: Token) -> None:
        node = self.graph.node(token.node_id)
        rerun = self.state.rerun
        if rerun is not None:
            reused = rerun.reuse.get(self.visit_key(token))
            if reused is not None:  # a re-run: this visit takes the original's output
                self.emit(
                    CompleteToken(token.id, reused.input, reused.output, self.at, reused.token_id)
                )
                self.work.append(("advance", token.id))
                return
            if token.node_id == rerun.from_node and rerun.node_input is not None:
                self.run_node(token, node, dict(rerun.node_input))
                return
        self.run_node(token, node, self.node_input(token, node))

    def visit_key(self, token: Token) -> VisitKey:
        """Which visit of its node (at its fan-out position) ``token`` is (``rerun``)."""
        branch = tuple(step.index for step in token.branch)
        earlier = sum(
            1
            for other in self.state.tokens.values()
            if other.seq < token.seq
            and other.node_id == token.node_id
            and tuple(step.index for step in other.branch) == branch
        )
        return (token.node_id, branch, earlier)

    def run_node(self, token: Token, node: Node, node_input: JsonObject) -> None:
        if node.kind == "pass":
            self.finish_token(token, node_input, node_input)
        else:
            self.dispatch(token, node, node_input, attempt=1, delay_ms=0)

    def dispatch(
        self,
        token: Token,
        node: Node,
        node_input: JsonObject,
        attempt: int,
        delay_ms: int,
        *,
        reattach: bool = False,
    ) -> None:
        target = node.target_id or ""
        match node.kind:
            case "task":
                self.emit(
                    DispatchTask(
                        token.id,
                        target,
                        node.target_version,
                        node_input,
                        attempt,
                        delay_ms,
                        node.timeout_s,
                    )
                )
            case "subworkflow":
                self.emit(
                    StartSubworkflow(
                        token.id,
                        target,
                        node.target_version,
                        node_input,
                        attempt,
                        delay_ms,
                        node.timeout_s,
                        reattach,
                    )
                )
            case "agent":
                conversation = None
                if node.target_ref is not None:
                    conversation = resolve_ref(node.target_ref, self.scope(token))
                    if not isinstance(conversation, str) or not conversation:
                        message = f"agent node {node.id}: {node.target_ref} gave no conversation"
                        self.fail_token(token, NodeError(INVALID_INPUT, message))
                        return
                self.emit(
                    CallAgent(
                        token.id,
                        node.target_id,
                        conversation,
                        node_input,
                        node.mode,
                        attempt,
                        delay_ms,
                        node.timeout_s,
                    )
                )
            case "pass":
                raise AssertionError("pass nodes are never dispatched")
            case _:
                assert_never(node.kind)

    def finish_token(self, token: Token, raw: Any, node_input: Any = None) -> None:
        node = self.graph.node(token.node_id)
        output = raw
        if node.output_mapping is not None:
            output = apply_mapping(node.output_mapping, self.scope(token, output=raw))
        node_input = token.input if node_input is None else node_input
        self.emit(CompleteToken(token.id, node_input, output, self.at))
        self.work.append(("advance", token.id))

    def fail_token(self, token: Token, error: NodeError) -> None:
        self.emit(FailToken(token.id, error, self.at))
        node = self.graph.node(token.node_id)
        if node.on_failure == "drop":
            self.touch(token)
        else:
            self.fail_run(error, node.id, token.id)

    def fail_run(
        self, error: NodeError, node_id: str | None = None, token_id: str | None = None
    ) -> None:
        if not self.running:
            return
        self.cancel_live(lambda _t: True)
        self.emit(FailRun(error, self.at, node_id, token_id))

    def cancel_live(self, which: Any) -> None:
        for token_id in sorted(self.state.live, key=lambda t: self.token(t).seq):
            if which(self.token(token_id)):
                self.emit(CancelToken(token_id, self.at))

    def touch(self, token: Token) -> None:
        self.dirty_groups.update(step.group_id for step in token.branch)

    # ---- moving on

    def advance(self, token: Token) -> None:
        """Follow the edges out of a done token."""
        edges = self.graph.outgoing(token.node_id)
        self.touch(token)
        if not edges:
            return
        scope = self.scope(token, output=token.output)
        matched = [
            e for e in edges if not e.otherwise and (e.when is None or evaluate(e.when, scope))
        ]
        if not matched:
            matched = [e for e in edges if e.otherwise]
        spawns = self.spawns(token, matched, scope)
        if spawns is None:
            return
        if not any(e.foreach for e in matched) and len(matched) <= 1:
            for edge, _item, _index in spawns:
                self.enter(edge.to, token, token.branch, token.item, token.index)
            return
        group = Group(
            fanout_group_id(token),
            len(spawns),
            token.id,
            self.graph.closing_join(matched[0].to) if matched else None,
        )
        self.emit(CreateGroup(group))
        self.dirty_groups.add(group.id)
        for k, (edge, item, index) in enumerate(spawns):
            branch = (*token.branch, BranchStep(group.id, k))
            self.enter(
                edge.to,
                token,
                branch,
                item,
                k if index is None else index,
                via_foreach=edge.foreach is not None,
            )

    def spawns(
        self, token: Token, matched: list[Edge], scope: Mapping[str, Any]
    ) -> list[tuple[Edge, Any, int | None]] | None:
        out: list[tuple[Edge, Any, int | None]] = []
        for edge in matched:
            if edge.foreach is None:
                out.append((edge, token.item, None))
                continue
            items = resolve_ref(edge.foreach, scope)
            if not isinstance(items, list):
                message = (
                    f"edge {edge.source}->{edge.to}: foreach {edge.foreach} is "
                    f"{type(items).__name__}, not a list"
                )
                self.fail_run(NodeError(INVALID_INPUT, message), token.node_id, token.id)
                return None
            out.extend((edge, item, i) for i, item in enumerate(items))
        return out

    def enter(
        self,
        node_id: str,
        parent: Token | None,
        branch: tuple[BranchStep, ...],
        item: Any,
        index: int | None,
        *,
        via_foreach: bool = False,
    ) -> None:
        node = self.graph.node(node_id)
        value = item if via_foreach else (parent.output if parent else None)
        if node.join is not None and branch:
            step = branch[-1]
            self.emit(RecordArrival(node_id, step.group_id, step.index, value))
            self.dirty_groups.add(step.group_id)
            return
        branches = (value,) if node.join is not None else None
        self.new_token(node_id, parent, branch, item, index, branches, via_foreach)

    # ---- fan-in

    def settle(self) -> bool:
        """Fire or fail the join of one touched group; True when that created new work.

        Innermost groups go first, one at a time, and the work queue drains between them: an
        outer group's branch is still open while an inner join is about to fire into it.
        """
        while self.dirty_groups and self.running:
            group_id = max(self.dirty_groups, key=self.group_depth)
            self.dirty_groups.discard(group_id)
            if group_id in self.state.groups and self.settle_group(self.state.groups[group_id]):
                return True
        return False

    def group_depth(self, group_id: str) -> tuple[int, str]:
        group = self.state.groups.get(group_id)
        depth = len(self.token(group.origin_token_id).branch) if group else 0
        return depth, group_id

    def settle_group(self, group: Group) -> bool:
        joins = [j for (_n, g), j in self.state.joins.items() if g == group.id]
        open_branches = self.open_branches(group.id)
        if not joins and not open_branches and group.join_node_id is not None:
            joins = [JoinState(group.join_node_id, group.id)]
        progressed = False
        for join in joins:
            if join.fired or not self.running:
                continue
            spec = self.graph.node(join.node_id).join
            assert spec is not None
            arrived = len(join.arrivals)
            if (spec.mode == "any" and arrived >= 1) or (
                spec.mode == "n" and arrived >= (spec.n or 1)
            ):
                self.fire(join, group)
                progressed = True
            elif not open_branches:
                if spec.mode == "all":
                    self.fire(join, group)
                else:
                    need = 1 if spec.mode == "any" else spec.n
                    message = (
                        f"join {join.node_id} ({spec.mode}) needed {need} branch(es), "
                        f"{arrived} of {group.size} arrived"
                    )
                    self.fail_run(NodeError(EXECUTION_FAILED, message), join.node_id)
                progressed = True
        return progressed

    def open_branches(self, group_id: str) -> set[int]:
        return {
            step.index
            for token_id in self.state.live
            for step in self.token(token_id).branch
            if step.group_id == group_id
        }

    def fire(self, join: JoinState, group: Group) -> None:
        self.emit(FireJoin(join.node_id, group.id))
        values = tuple(join.arrivals[i] for i in sorted(join.arrivals))
        self.cancel_live(lambda t: any(s.group_id == group.id for s in t.branch))
        origin = self.token(group.origin_token_id)
        self.new_token(join.node_id, origin, origin.branch, origin.item, origin.index, values)
