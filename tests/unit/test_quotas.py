"""The pure quota decisions (``core.quotas``) and ``wonder quota`` / ``wonder keys --admin`` on a
real SQLite store."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from cluster.cli import main
from core.quotas import Bucket, Limit, Quota, check_count, check_tokens, take
from core.store import Store


def test_a_bucket_allows_its_burst_then_refuses_until_a_token_is_back() -> None:
    quota = Quota(requests_per_second=2, burst=3)
    bucket, now = None, 100.0
    for _ in range(3):
        bucket, refusal = take(bucket, quota, now)
        assert refusal is None
    bucket, refusal = take(bucket, quota, now)
    assert refusal is not None and refusal.limit is Limit.REQUESTS
    assert refusal.retry_after_s == pytest.approx(0.5)
    bucket, refusal = take(bucket, quota, now + 0.5)
    assert refusal is None and bucket is not None and bucket.tokens == pytest.approx(0.0)
    # a long pause refills up to the burst, no more
    bucket, _ = take(bucket, quota, now + 1000)
    assert bucket == Bucket(tokens=2.0, at=now + 1000)


def test_without_a_rate_nothing_is_kept_or_refused() -> None:
    assert take(None, Quota(), 1.0) == (None, None)
    assert Quota(requests_per_second=5).capacity() == 5.0
    assert Quota(requests_per_second=0.1).capacity() == 1.0


def test_counts_refuse_at_the_limit() -> None:
    assert check_count(Limit.TURNS, 2, None, "active turns") is None
    assert check_count(Limit.TURNS, 2, 3, "active turns") is None
    refusal = check_count(Limit.TURNS, 3, 3, "active turns")
    assert refusal is not None and "3 active turns (limit 3)" in refusal.message


def test_tokens_refuse_until_midnight_utc() -> None:
    now = datetime(2026, 11, 23, 23, 0, tzinfo=UTC)
    assert check_tokens(99, 100, now) is None
    refusal = check_tokens(100, 100, now)
    assert refusal is not None and refusal.retry_after_s == 3600.0


def test_cli_sets_quotas_admin_keys_and_audits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("WONDER_DATA_DIR", str(tmp_path))
    assert main(["keys", "create", "ops", "--admin"]) == 0
    out = capsys.readouterr().out
    client_id = out.split("client: ")[1].split()[0]
    key = out.split("api key: ")[1].split()[0]
    store = Store.open(f"sqlite:///{tmp_path / 'wonder.db'}")
    assert store.admin_keys.is_admin(key) and not store.admin_keys.is_admin(key + "x")

    assert (
        main(["quota", "set", client_id, "--requests-per-second", "5", "--conversations", "9"]) == 0
    )
    assert json.loads(capsys.readouterr().out) == {"requests_per_second": 5.0, "conversations": 9}
    assert main(["quota", "set", client_id, "--unlimited", "conversations", "--burst", "7"]) == 0
    assert store.quotas.get(client_id) == Quota(requests_per_second=5, burst=7)
    assert main(["quota", "set", client_id, "--burst", "0"]) == 2  # invalid input
    assert main(["quota", "set", "client_nope", "--burst", "2"]) == 3  # not found

    actions = [(e.action, e.target) for e in store.audit.list(client_id)]
    (created,) = store.keys.list(client_id)
    assert actions == [
        ("key.create", f"key:{created.id}"),
        ("quota.set", f"client:{client_id}"),
        ("quota.set", f"client:{client_id}"),
    ]
    assert all(e.actor.startswith("cli:") for e in store.audit.list())


def test_the_gateway_guard_over_a_real_store(tmp_path: Path) -> None:
    """The shell: a fake clock, a real SQLite store, the cache dropped after a change."""
    from core.conversations import create_conversation
    from core.errors import QuotaExceeded
    from core.ids import utc_now
    from serving.gateway.quota_checks import QuotaGuard
    from tests.factories import make_client

    store = Store.open(f"sqlite:///{tmp_path / 'wonder.db'}")
    client_id, _ = make_client(store)
    clock = [0.0]
    guard = QuotaGuard(store, monotonic=lambda: clock[0])
    guard.admit_request(client_id)  # no quota: unlimited
    store.quotas.put(
        client_id, Quota(requests_per_second=1, conversations=1, memories=2), utc_now()
    )
    guard.forget(client_id)
    guard.admit_request(client_id)
    with pytest.raises(QuotaExceeded) as over:
        guard.admit_request(client_id)
    assert over.value.retry_after_s == pytest.approx(1.0)
    clock[0] += 1.0
    guard.admit_request(client_id)

    guard.admit_conversation(client_id)
    create_conversation(store, client_id=client_id)
    with pytest.raises(QuotaExceeded, match="1 conversations stored"):
        guard.admit_conversation(client_id)
    guard.admit_memory(1, guard.memories_allowed(client_id))
    with pytest.raises(QuotaExceeded, match="memories"):
        guard.admit_memory(2, guard.memories_allowed(client_id))

    store.quotas.put(client_id, Quota(concurrent_websockets=1), utc_now())
    clock[0] += 10  # past the cache
    with guard.websocket(client_id):
        with pytest.raises(QuotaExceeded, match="open WebSockets"), guard.websocket(client_id):
            pass
    with guard.websocket(client_id):  # the first one closed
        pass
