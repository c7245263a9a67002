"""processor_svc.ack_tracker: only a contiguous prefix of completed entries is acknowledged."""

from __future__ import annotations

import pytest

from processor_svc.ack_tracker import AckToken, AckTracker


def test_the_completed_prefix_never_skips_an_incomplete_entry() -> None:
    tracker = AckTracker()
    tokens = [tracker.register(f"1-{i}") for i in range(4)]
    tokens[1].release()
    tokens[3].release()
    assert tracker.completed_prefix() == []
    tokens[0].release()
    assert tracker.completed_prefix() == ["1-0", "1-1"]
    assert tracker.outstanding == 2
    assert not tracker.wait_idle(0.01)
    tokens[2].release()
    assert tracker.wait_idle(0.01)
    assert tracker.completed_prefix() == ["1-2", "1-3"]
    assert tracker.completed_prefix() == []


def test_a_token_holds_its_creator_until_released_and_refuses_extra_releases() -> None:
    done: list[str] = []
    token = AckToken("1-0", on_done=lambda t: done.append(t.entry_id))
    token.hold(2)  # two handlers
    token.release()
    token.release()
    assert not token.done  # the creator's own hold is still there
    token.release()
    assert token.done and done == ["1-0"]
    with pytest.raises(RuntimeError, match="released more often than held"):
        token.release()
