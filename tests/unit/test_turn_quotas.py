"""Turn quotas for every turn, and quotas per user (issue 17): the pure decisions
(``core.quotas``), the conversation's planning over them, what ``StoredQuotas`` reads from a real
SQLite store, the gateway guard's per-user buckets, and ``wonder quota set --user``. No Ray."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from actors.conversation import planning
from actors.conversation.domain import (
    BeginTurn,
    FailTurn,
    ModelAnswered,
    Recovered,
    RecoveredTurn,
    TurnPhase,
    TurnRequested,
)
from actors.scheduler import CronScheduler, Fired, SchedulerPorts
from cluster.cli import main
from core.conversations import create_conversation
from core.domain import (
    AgentCaller,
    Turn,
    TurnStatus,
    Usage,
    UserCaller,
    WorkflowCaller,
)
from core.errors import ErrorCode, QuotaExceeded
from core.ids import utc_now
from core.quotas import (
    Limit,
    Quota,
    TurnAdmission,
    TurnFigures,
    UserQuota,
    check_batch,
    check_turn_tokens,
    refuse_turn,
    tokens_left,
    user_scope,
)
from core.routes import Route
from core.store import Store
from core.trigger_model import CronTrigger
from core.turn_quotas import StoredQuotas
from core.workflows import ConversationParent, WorkflowParent, WorkflowRun
from serving.gateway.quota_checks import QuotaGuard
from tests.factories import make_client
from tests.unit.test_conversation_planning import (
    NOW,
    active_turn,
    call,
    live,
    names,
    received,
    state_with,
    turns_only,
)

ALICE = user_scope("alice")


def admission(*scopes: TurnFigures, user: str | None = "alice") -> TurnAdmission:
    return TurnAdmission(user, NOW, scopes)


# --------------------------------------------------------------------------- the pure decisions


@pytest.mark.parametrize(
    ("scopes", "refused_by"),
    [
        ((), None),
        ((TurnFigures("", 3, None, active_turns=2),), None),
        ((TurnFigures("", 3, None, active_turns=3),), "quota concurrent_turns reached"),
        ((TurnFigures("", None, 100, tokens_today=99),), None),
        ((TurnFigures("", None, 100, tokens_today=100),), "quota tokens_per_day reached"),
        (
            (TurnFigures("", 9, 1000, 1, 10), TurnFigures(ALICE, 1, None, active_turns=1)),
            "user alice: quota concurrent_turns reached: 1 active turns (limit 1)",
        ),
        (
            (TurnFigures("", None, None), TurnFigures(ALICE, None, 5, tokens_today=7)),
            "user alice: quota tokens_per_day reached: 7 model tokens today (limit 5)",
        ),
    ],
)
def test_a_new_turn_is_refused_by_the_first_quota_it_would_pass(
    scopes: tuple[TurnFigures, ...], refused_by: str | None
) -> None:
    refusal = refuse_turn(admission(*scopes))
    if refused_by is None:
        assert refusal is None
    else:
        assert refusal is not None and refusal.message.startswith(refused_by)


def test_the_tokens_left_are_the_tightest_limit_and_refuse_the_next_call() -> None:
    scopes = (TurnFigures("", None, 1000, tokens_today=400), TurnFigures(ALICE, 2, 300, 0, 50))
    assert tokens_left(scopes) == 250
    assert tokens_left((TurnFigures("", 3, None),)) is None
    assert tokens_left((TurnFigures("", None, 10, tokens_today=12),)) == 0
    late = datetime(2026, 1, 1, 23, 30, tzinfo=UTC)
    assert check_turn_tokens(249, 250, late) is None
    over = check_turn_tokens(250, 250, late)
    assert over is not None and over.limit is Limit.TOKENS and over.retry_after_s == 1800.0
    assert check_turn_tokens(10**9, None, late) is None


def test_a_batch_is_refused_whole() -> None:
    assert check_batch(Limit.MEMORIES, 8, 2, 10, "memories stored") is None
    refusal = check_batch(Limit.MEMORIES, 9, 2, 10, "memories stored")
    assert refusal is not None
    assert (
        refusal.message == "quota memories: 9 memories stored and 2 more would pass the limit of 10"
    )


# --------------------------------------------------------------------------- planning


def test_an_agents_call_over_quota_is_recorded_and_fails_with_reason_quota() -> None:
    over = admission(TurnFigures("", 1, None, active_turns=1))
    decisions = planning.plan(state_with(), received(policy_applies=False, admission=over))
    assert names(decisions) == ["BeginTurn", "FailTurn"]
    begin, fail = turns_only(decisions)
    assert isinstance(begin, BeginTurn) and begin.turn.user_id == "alice"
    assert isinstance(fail, FailTurn) and fail.turn_id == "t-new"
    assert fail.reason.startswith("quota: quota concurrent_turns reached")
    assert fail.error is not None and fail.error.code is ErrorCode.QUOTA_EXCEEDED
    assert fail.error.retriable and fail.error.message.endswith("retry in 1s")


def test_a_users_message_was_admitted_by_the_gateway_and_starts() -> None:
    over = admission(TurnFigures("", 1, None, active_turns=5))
    decisions = planning.plan(state_with(), received(admission=over))
    assert names(decisions) == ["BeginTurn", "AssembleContext"]


def test_an_agents_call_within_quota_starts_and_works_for_the_callers_user() -> None:
    fine = admission(TurnFigures("", 2, 100, active_turns=1, tokens_today=10), user="bob")
    decisions = planning.plan(state_with(), received(policy_applies=False, admission=fine))
    assert names(decisions) == ["BeginTurn", "AssembleContext"]
    assert isinstance(decisions[0], BeginTurn) and decisions[0].turn.user_id == "bob"


@pytest.mark.parametrize(
    ("author", "user_id"), [("user-1", "user-1"), ("c", None)], ids=["a user", "the client"]
)
def test_a_users_turn_works_for_its_author_unless_the_client_posts(
    author: str, user_id: str | None
) -> None:
    event = received(author=author, caller=UserCaller(user_id=author))
    (begin, _) = turns_only(planning.plan(state_with(), event))
    assert isinstance(begin, BeginTurn) and begin.turn.user_id == user_id


def test_a_delegated_turn_over_quota_fails_instead_of_starting() -> None:
    child = active_turn(
        "t-child", caller=AgentCaller(agent_id="a", turn_id="t0", conversation_id="p")
    )
    over = admission(TurnFigures("", None, 50, tokens_today=50))
    decisions = planning.plan(state_with(), TurnRequested(child, NOW, admission=over))
    assert names(decisions) == ["FailTurn"]
    (fail,) = turns_only(decisions)
    assert isinstance(fail, FailTurn) and fail.reason.startswith("quota: quota tokens_per_day")
    within = admission(TurnFigures("", None, 50, tokens_today=49))
    started = planning.plan(state_with(), TurnRequested(child, NOW, admission=within))
    assert names(started) == ["StartTurn", "AssembleContext"]


def test_an_unstarted_turn_found_at_recovery_is_checked_unless_a_user_started_it() -> None:
    """A delegated child's actor usually finds its first turn at start (recovery), before the
    delegator's call reaches it; a user's message acknowledged in the store was admitted."""
    over = admission(TurnFigures("", 1, None, active_turns=1))
    delegated = active_turn(
        "t-child", caller=AgentCaller(agent_id="a", turn_id="t0", conversation_id="p")
    )
    users = active_turn("t-user")
    decisions = planning.plan(
        state_with(),
        Recovered(
            (RecoveredTurn(delegated, admission=over), RecoveredTurn(users, admission=over)), NOW
        ),
    )
    assert names(decisions) == ["FailTurn", "StartTurn", "AssembleContext"]
    turn_ids = [getattr(d, "turn_id", None) for d in turns_only(decisions)]
    assert turn_ids == ["t-child", "t-user", "t-user"]


def test_the_days_tokens_running_out_mid_turn_stops_before_the_tools_run() -> None:
    thinking = live(TurnPhase.THINKING, usage=Usage(prompt_tokens=100))
    tools = (call("search", {"q": "x"}),)
    spent = ModelAnswered("t1", "", tools, Usage(prompt_tokens=60), ("op-1",), NOW, tokens_left=150)
    decisions = planning.plan(state_with(thinking), spent)
    assert names(decisions) == ["AddUsage", "FailTurn"]
    fail = turns_only(decisions)[1]
    assert isinstance(fail, FailTurn) and fail.usage == Usage(prompt_tokens=160)
    assert "it used 160 model tokens and the day had 150 left" in fail.reason
    assert fail.error is not None and fail.error.code is ErrorCode.QUOTA_EXCEEDED

    within = ModelAnswered(
        "t1", "", tools, Usage(prompt_tokens=40), ("op-1",), NOW, tokens_left=150
    )
    assert names(planning.plan(state_with(thinking), within)) == ["AddUsage", "RunTools"]
    # A plain answer was paid for already: it stands, and the turn completes.
    answer = ModelAnswered("t1", "done", (), Usage(prompt_tokens=60), (), NOW, tokens_left=150)
    assert names(planning.plan(state_with(thinking), answer)) == [
        "AddUsage",
        "AppendAgentMessage",
        "CompleteTurn",
    ]


# --------------------------------------------------------------------------- the store


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store.open(f"sqlite:///{tmp_path / 'wonder.db'}")


def _turns(store: Store, client_id: str) -> str:
    """A conversation of ``client_id`` with turns: alice's active one, bob's finished one of
    today (30 tokens), alice's finished one of yesterday (500 tokens); returns its id."""

    conv = create_conversation(store, client_id=client_id)
    today = datetime.now(UTC)
    for turn_id, user, status, tokens, at in (
        ("t-alice", "alice", TurnStatus.ACTIVE, 0, today),
        ("t-bob", "bob", TurnStatus.COMPLETED, 30, today),
        ("t-old", "alice", TurnStatus.COMPLETED, 500, today - timedelta(days=2)),
    ):
        store.turns.insert(
            Turn(
                id=turn_id,
                conversation_id=conv.id,
                agent_id=None,
                caller=UserCaller(user_id=user),
                user_id=user,
                input="hi",
                status=status,
                usage=Usage(prompt_tokens=tokens),
                created_at=at,
            )
        )
    return conv.id


async def test_stored_quotas_read_the_figures_only_a_limit_asks_for(store: Store) -> None:

    client_id, _ = make_client(store)
    _turns(store, client_id)
    clock = [0.0]
    quotas = StoredQuotas(store, monotonic=lambda: clock[0])
    now = datetime.now(UTC)
    assert quotas.admission(client_id, "alice", now) == TurnAdmission("alice", now)
    assert await quotas.tokens_left(client_id, "t-alice", now) is None

    store.quotas.put(client_id, Quota(concurrent_turns=5, tokens_per_day=100), now)
    store.quotas.put_user(client_id, "alice", UserQuota(concurrent_turns=1), now)
    assert quotas.admission(client_id, "alice", now).scopes == ()  # cached for 2 s
    clock[0] += 2.0
    figures = quotas.admission(client_id, "alice", now).scopes
    assert figures == (
        TurnFigures("", 5, 100, active_turns=1, tokens_today=30),
        TurnFigures(ALICE, 1, None, active_turns=1, tokens_today=0),
    )
    refusal = refuse_turn(quotas.admission(client_id, "alice", now))
    assert refusal is not None and refusal.message.startswith("user alice: quota concurrent")
    assert refuse_turn(quotas.admission(client_id, "alice", now, excluding="t-alice")) is None
    assert refuse_turn(quotas.admission(client_id, "bob", now)) is None  # bob has no own quota
    assert await quotas.tokens_left(client_id, "t-alice", now) == 70

    store.quotas.put_user(client_id, "bob", UserQuota(tokens_per_day=20), now)
    quotas.forget(client_id)  # a change made through this process is seen at once
    refusal = refuse_turn(quotas.admission(client_id, "bob", now))
    assert refusal is not None and "user bob: quota tokens_per_day reached: 30" in refusal.message
    assert store.quotas.users_with_quotas(client_id) == ["alice", "bob"]
    assert store.quotas.delete_user(client_id, "bob") and not store.quotas.delete_user(
        client_id, "bob"
    )


def test_the_acting_user_follows_delegations_and_workflow_runs(store: Store) -> None:

    client_id, _ = make_client(store)
    conv_id = _turns(store, client_id)
    quotas = StoredQuotas(store)
    assert quotas.acting_user(client_id, UserCaller(user_id="carol")) == "carol"
    assert quotas.acting_user(client_id, UserCaller(user_id=client_id)) is None
    by_agent = AgentCaller(agent_id="a", turn_id="t-bob", conversation_id=conv_id)
    assert quotas.acting_user(client_id, by_agent) == "bob"
    outer = WorkflowRun(
        id="run-outer",
        workflow_id="w",
        workflow_version=1,
        client_id=client_id,
        parent=ConversationParent(conversation_id=conv_id, turn_id="t-alice"),
        created_at=NOW,
    )
    inner = outer.model_copy(
        update={"id": "run-inner", "parent": WorkflowParent(run_id="run-outer", token_id="x")}
    )
    api_run = outer.model_copy(update={"id": "run-api", "parent": None})
    for run in (outer, inner, api_run):
        store.workflow_runs.insert(run)
    assert quotas.acting_user(client_id, WorkflowCaller(run_id="run-inner")) == "alice"
    assert quotas.acting_user(client_id, WorkflowCaller(run_id="run-api")) is None
    assert quotas.acting_user(client_id, WorkflowCaller(run_id="run-gone")) is None


def test_the_guard_keeps_a_bucket_per_user(store: Store) -> None:

    client_id, _ = make_client(store)
    store.quotas.put(client_id, Quota(requests_per_second=100), utc_now())
    store.quotas.put_user(client_id, "alice", UserQuota(requests_per_second=1), utc_now())
    clock = [0.0]
    guard = QuotaGuard(store, monotonic=lambda: clock[0])
    guard.admit_request(client_id, "alice")
    with pytest.raises(QuotaExceeded, match="user alice: more than 1 requests per second"):
        guard.admit_request(client_id, "alice")
    guard.admit_request(client_id, "bob")  # another user, and the client itself, go on
    guard.admit_request(client_id)
    clock[0] += 1.0
    guard.admit_request(client_id, "alice")

    store.quotas.put_user(client_id, "alice", UserQuota(concurrent_turns=0), utc_now())
    guard.forget(client_id)
    with pytest.raises(QuotaExceeded, match="user alice: quota concurrent_turns"):
        guard.admit_turn(client_id, "alice")
    guard.admit_turn(client_id, "bob")


def test_cli_sets_a_users_quota(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("WONDER_DATA_DIR", str(tmp_path))
    assert main(["keys", "create", "app"]) == 0
    client_id = capsys.readouterr().out.split("client: ")[1].split()[0]
    args = ["quota", "set", client_id, "--user", "alice"]
    assert main([*args, "--concurrent-turns", "2", "--tokens-per-day", "900"]) == 0
    assert json.loads(capsys.readouterr().out) == {"concurrent_turns": 2, "tokens_per_day": 900}
    assert main([*args, "--unlimited", "tokens_per_day", "--requests-per-second", "3"]) == 0
    capsys.readouterr()
    assert main([*args, "--memories", "5"]) == 2  # usage
    assert "memories are the client's only" in capsys.readouterr().err
    assert main(["quota", "set", client_id, "--user", "bad user", "--burst", "2"]) == 2
    assert main(["quota", "show", client_id, "--user", "alice"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "requests_per_second": 3.0,
        "concurrent_turns": 2,
    }

    store = Store.open(f"sqlite:///{tmp_path / 'wonder.db'}")
    entries = [e for e in store.audit.list(client_id) if e.action == "quota.set"]
    assert [e.target for e in entries] == ["user:alice", "user:alice"]
    assert entries[1].details["before"] == {"concurrent_turns": 2, "tokens_per_day": 900}
    assert entries[1].details["user_id"] == "alice"


class NoPosts:
    async def post_message(self, *args: object, **kwargs: object) -> None:
        raise AssertionError("a trigger over quota must not post")


def tick_over_quota(store: Store, quota: Quota, route: Route) -> tuple[str, Fired]:
    """A client with ``quota`` and a trigger due now on ``route``: one tick of the scheduler."""
    client_id, _ = make_client(store)
    now = utc_now()
    store.quotas.put(client_id, quota, now)
    trigger = CronTrigger(
        id=f"cron-{client_id}",
        client_id=client_id,
        schedule="* * * * *",
        template="tick",
        route=route,
        next_due=now - timedelta(seconds=1),
        created_at=now,
    )
    store.triggers.save(trigger)
    ports = SchedulerPorts(store=store, conversations=NoPosts(), quotas=StoredQuotas(store))  # type: ignore[arg-type]
    # Built outside an event loop, the scheduler does not start its own ticking (which would
    # race this test's tick for the claim): the test drives one tick.
    scheduler = CronScheduler(lambda: ports, tick_s=60)
    [fired] = asyncio.run(scheduler.tick())
    assert fired.turn_id is None and fired.error is not None
    return client_id, fired


def test_a_cron_trigger_over_its_clients_turn_quota_is_skipped(store: Store) -> None:
    route = Route(kind="session", target="daily")
    _client_id, fired = tick_over_quota(store, Quota(concurrent_turns=0), route)
    assert fired.error is not None
    assert fired.error.startswith("quota: quota concurrent_turns reached: 0 active turns")
    assert store.triggers.fired(fired.trigger_id)  # claimed: this due time is not fired again


def test_a_cron_trigger_that_would_make_a_conversation_over_quota_is_skipped(
    store: Store,
) -> None:
    route = Route(kind="persona", target="helper")  # its main session is made on first use
    client_id, fired = tick_over_quota(store, Quota(conversations=0), route)
    assert fired.error is not None
    assert fired.error.startswith("quota: quota conversations reached: 0 conversations stored")
    assert store.conversations.list(client_id=client_id) == []
