"""The move gate's rules on their own (``processor_svc.move_gate``), on a fake clock."""

from __future__ import annotations

import threading

from processor_svc.move_gate import MoveGate


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 0.01  # every look costs a little time, so a wait can run out
        return self.now


def gate(held: set[tuple[str, int]] | None = None, timeout: float = 1.0) -> MoveGate:
    holders = held if held is not None else set()
    return MoveGate(lambda key, shard: any(k == key and s != shard for k, s in holders),
                    timeout=timeout, clock=Clock())  # fmt: skip


def test_a_shard_not_read_here_never_holds_a_move_up() -> None:
    assert gate().wait_applied(3, "5-0", threading.Event())


def test_an_incoming_half_waits_until_the_old_shard_applied_the_outgoing_half() -> None:
    moves, cancel = gate(timeout=60), threading.Event()
    moves.reading(3)  # taking over: no position yet
    done = threading.Event()

    def wait() -> None:
        if moves.wait_applied(3, "10-1", cancel):
            done.set()

    waiter = threading.Thread(target=wait)
    waiter.start()
    moves.advance(3, "10-0")  # not far enough
    assert not done.wait(0.2)
    moves.advance(3, "10-1")
    assert done.wait(5)
    waiter.join()
    assert moves.expired == 0


def test_positions_never_go_back_and_a_stopped_shard_releases_its_waiters() -> None:
    moves, cancel = gate(timeout=60), threading.Event()
    moves.reading(1)
    moves.advance(1, "9-0")
    moves.advance(1, "8-5")  # an older position changes nothing
    assert moves.wait_applied(1, "9-0", cancel)
    done = threading.Event()
    waiter = threading.Thread(target=lambda: moves.wait_applied(1, "20-0", cancel) and done.set())
    waiter.start()
    assert not done.wait(0.1)
    moves.stopped(1)  # handed over: its deletion is someone else's business now
    assert done.wait(5)
    waiter.join()


def test_a_cancelled_wait_says_so_and_an_endless_one_expires_and_is_counted() -> None:
    counted: list[int] = []
    moves = MoveGate(lambda key, shard: True, timeout=0.5, clock=Clock(),
                     on_expired=lambda: counted.append(1))  # fmt: skip
    cancel = threading.Event()
    moves.reading(2)
    cancel.set()
    assert not moves.wait_applied(2, "1-0", cancel)
    assert moves.expired == 0
    assert moves.wait_applied(2, "1-0", threading.Event())  # gives up: liveness first
    assert moves.expired == 1
    assert moves.wait_released("shop/c", 2, threading.Event())  # held elsewhere for ever
    assert moves.expired == 2
    assert counted == [1, 1]  # the metric's callback, once per wait given up


def test_a_snapshot_object_held_by_another_shard_waits_until_it_is_released() -> None:
    held = {("shop/c", 0)}
    moves, cancel = gate(held, timeout=60), threading.Event()
    assert moves.held_elsewhere("shop/c", 1)
    assert not moves.held_elsewhere("shop/c", 0)
    done = threading.Event()
    waiter = threading.Thread(
        target=lambda: moves.wait_released("shop/c", 1, cancel) and done.set()
    )
    waiter.start()
    assert not done.wait(0.2)
    held.clear()
    assert done.wait(5)
    waiter.join()
    held.add(("shop/c", 0))
    cancel.set()
    assert not moves.wait_released("shop/c", 1, cancel)
