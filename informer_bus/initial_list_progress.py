"""A durable subscriber's initial list, as the command line reports it on stderr.

A new group prints the known state before the changes, shard by shard; a restart prints again
the shards whose initial list it had not printed whole (``informer_bus.subscription.durable``).
With tens of thousands of objects that takes seconds, which stdout alone does not explain.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final

from informer_bus.subscription import DurableSubscription

__all__ = ["REPORT_SECONDS", "InitialListProgress"]

REPORT_SECONDS: Final = 2.0
"""How often a long initial list says how far it got."""


class InitialListProgress:
    """A durable subscriber's initial list on stderr: what it prints first, how far it got
    every :data:`REPORT_SECONDS`, and when it is done (30,000 objects print for seconds with
    nothing else to tell the known state from the changes). ``say`` prints a line on stderr;
    a bystander (``None``) has no initial list."""

    def __init__(
        self, subscription: DurableSubscription | None, say: Callable[[str], None]
    ) -> None:
        self._subscription = subscription
        self._say = say
        self._report_at = time.monotonic() + REPORT_SECONDS
        self.done = subscription is None or not subscription.initial_total
        if subscription is not None and not self.done:
            self._say(
                f"group {subscription.group!r}: printing the known state of "
                f"{subscription.initial_shards} shards first ({subscription.initial_total} "
                "objects), then the changes; a shard not printed whole is printed again, "
                "whole, on the next start"
            )

    def tick(self) -> None:
        """After each delta printed while :attr:`done` is false."""
        subscription = self._subscription
        assert subscription is not None  # done from the start otherwise
        if subscription.initial_read == subscription.initial_total:
            self.done = True
            self._say(
                f"initial list printed ({subscription.initial_total} objects); now the changes"
            )
            return
        now = time.monotonic()
        if now >= self._report_at:
            self._report_at = now + REPORT_SECONDS
            self._say(
                f"initial list: {subscription.initial_read} of {subscription.initial_total} "
                f"objects read, {subscription.initial_shards_done} of "
                f"{subscription.initial_shards} shards printed whole"
            )
