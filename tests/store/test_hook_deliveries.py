"""Webhook deliveries remembered by signature until their window passes (``core.hooks``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from core.store import Store

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def test_a_delivery_is_claimed_once_until_it_expires(store: Store) -> None:
    hooks = store.hooks
    later = NOW + timedelta(seconds=300)
    assert hooks.claim_delivery("hook_1", "sha256=aa", later, NOW) == (True, None)
    assert hooks.claim_delivery("hook_1", "sha256=aa", later, NOW) == (False, None)  # in flight
    hooks.record_delivery("hook_1", "sha256=aa", '{"turn_id": "t1"}')
    assert hooks.claim_delivery("hook_1", "sha256=aa", later, NOW) == (False, '{"turn_id": "t1"}')
    # Another signature, or another hook, is another delivery.
    assert hooks.claim_delivery("hook_1", "sha256=bb", later, NOW) == (True, None)
    assert hooks.claim_delivery("hook_2", "sha256=aa", later, NOW) == (True, None)
    # A delivery whose post failed is released: the retry is taken.
    hooks.release_delivery("hook_1", "sha256=bb")
    assert hooks.claim_delivery("hook_1", "sha256=bb", later, NOW) == (True, None)
    # Once expired, it is forgotten (the window refuses it by then anyway).
    after = later + timedelta(seconds=1)
    assert hooks.claim_delivery("hook_1", "sha256=aa", after + timedelta(seconds=300), after) == (
        True,
        None,
    )
