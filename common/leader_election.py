"""client-go style leader election on a :class:`common.lease.Lease`, in its own thread.

The lease (:mod:`common.lease`) says who holds it and hands out fencing epochs; this module is
the loop around it: a candidate retries with jitter, a leader renews and runs its work in a
thread of its own, and leadership ends (the work stopped first, then the lease released) when
renewals fail past the renew deadline, someone else holds the lease, or the leader is fenced
(:meth:`LeaderElector.step_down`: a write refused for a newer epoch).
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable

import redis

from common.lease import Lease, LeaseStatus, warn_if_calls_outlast_the_margin
from common.rate_limiters import Clock, MonotonicClock
from common.settings import JITTER_FACTOR, LeaseTiming
from common.throttled_log import ThrottledLog

__all__ = ["LeaderElector"]

log = logging.getLogger(__name__)


class LeaderElector:
    """client-go leader election on a :class:`Lease`, in its own thread.

    Threading model:

    * :meth:`start` runs the election loop in a non-daemon thread named
      ``leader-elector[<lease key>]``. As a *candidate* it tries to acquire every
      ``retry_period`` (jittered up to x2.2, like client-go, so candidates do not collide).
    * On acquiring it starts a *worker* thread ``leader-work[<lease key>]#<epoch>`` that runs
      ``on_started_leading(epoch, stop_leading)``. The callback does the leader's work and must
      return soon after ``stop_leading`` (a ``threading.Event``) is set.
    * The election thread renews every ``retry_period``. Leadership ends when renewals fail (a
      Redis error is a failure, never a crash) for longer than ``renew_deadline``, when another
      holder or a different epoch shows up (the lease lapsed meanwhile), on :meth:`step_down`,
      on :meth:`stop`, or when the callback returns or raises (a leader that does no work must
      not keep the lease from replicas that would). Then: ``stop_leading`` is set, the election
      thread waits for the callback to return, releases the lease if it may still be ours (so a
      successor starts at once, and only after our work stopped), calls ``on_stopped_leading``
      (in the election thread) and becomes a candidate again after one retry period.

    ``renew_deadline < duration`` leaves the old leader ``duration - renew_deadline`` seconds to
    stop before anyone else can acquire; that only holds if one Redis call cannot outlast that
    margin (see :func:`common.redis_config.lease_client`; a warning is logged otherwise) and if
    the callback honours ``stop_leading`` promptly. Fencing covers what remains.

    ``timing`` (:class:`common.settings.LeaseTiming`, which enforces client-go's rule) gives the
    renew deadline and the retry period; raises ``ValueError`` unless the lease lasts
    ``timing.lease_duration``. ``clock`` (a :class:`common.rate_limiters.Clock`) measures the renew
    deadline and the waits; Redis measures the lease itself. Repeated failures are logged at
    most once per ``log_interval`` seconds.
    """

    def __init__(
        self,
        lease: Lease,
        *,
        timing: LeaseTiming | None = None,
        on_started_leading: Callable[[int, threading.Event], None],
        on_stopped_leading: Callable[[], None],
        clock: Clock | None = None,
        log_interval: float = 30.0,
    ) -> None:
        timing = timing if timing is not None else LeaseTiming()
        if lease.duration != timing.lease_duration:
            raise ValueError(
                f"the lease {lease.key} lasts {lease.duration:g} s but the timing says "
                f"{timing.lease_duration:g} s"
            )
        renew_deadline = timing.renew_deadline
        warn_if_calls_outlast_the_margin(lease, renew_deadline, "leader")
        self._lease = lease
        self._renew_deadline = renew_deadline
        self._retry_period = timing.retry_period
        self._on_started = on_started_leading
        self._on_stopped = on_stopped_leading
        self._clock: Clock = clock if clock is not None else MonotonicClock()
        self._errors = ThrottledLog(log, self._clock, log_interval)
        self._cond = threading.Condition()
        # Guarded by _cond:
        self._thread: threading.Thread | None = None
        self._worker: threading.Thread | None = None
        self._stopping = False
        self._release_on_stop = True
        self._leading_epoch: int | None = None
        self._stop_leading: threading.Event | None = None
        self._step_down_requested = False
        self._retired_epoch = 0  # leases with an epoch <= this are never led again (fenced)

    # --- public API ------------------------------------------------------------------------------

    @property
    def lease(self) -> Lease:
        """The lease this elector competes for."""
        return self._lease

    @property
    def is_leader(self) -> bool:
        """True from acquiring the lease until this leadership's ``stop_leading`` is set."""
        with self._cond:
            return self._leading_epoch is not None

    @property
    def epoch(self) -> int | None:
        """The epoch we lead with (the fencing token for our writes), ``None`` when not leading."""
        with self._cond:
            return self._leading_epoch

    def start(self) -> None:
        """Start the election thread. Raises ``RuntimeError`` if started or stopped before."""
        with self._cond:
            if self._thread is not None or self._stopping:
                raise RuntimeError("a LeaderElector can be started only once")
            self._thread = threading.Thread(
                target=self._run, name=f"leader-elector[{self._lease.key}]", daemon=False
            )
            self._thread.start()

    def stop(self, *, release: bool = True, timeout: float | None = None) -> None:
        """Stop leading (waiting for the leading callback to return) and stop electing.

        ``release=True`` gives the lease back so a successor takes over at once.
        ``release=False`` leaves it to expire, as a crash would (successors wait up to the lease
        duration). Idempotent. Must not be called from the leading callback (it would wait for
        itself): the callback uses :meth:`step_down` or simply returns. Raises ``TimeoutError``
        if the threads have not ended within ``timeout`` seconds.
        """
        with self._cond:
            if self._worker is threading.current_thread():
                raise RuntimeError("stop() called from the leading callback; use step_down()")
            if not self._stopping:
                self._stopping = True
                self._release_on_stop = release
            if self._stop_leading is not None:
                self._stop_leading.set()
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
            if thread.is_alive():
                raise TimeoutError(f"{thread.name} did not stop within {timeout} s")

    def step_down(self, epoch: int | None = None) -> bool:
        """Stop leading now, without renewing again: the leading work found itself fenced.

        Non-blocking, so the leading callback itself may call it. ``epoch``, when given, must be
        the epoch we lead with (a late call from an older leadership is ignored). The lease is
        released and an epoch we stepped down from is never led again: a future leadership,
        ours or another replica's, gets a new, higher epoch. Returns ``True`` if it applied.
        """
        with self._cond:
            current = self._leading_epoch
            if current is None or (epoch is not None and epoch != current):
                return False
            self._step_down_requested = True
            self._retired_epoch = max(self._retired_epoch, current)
            self._leading_epoch = None
            if self._stop_leading is not None:
                self._stop_leading.set()
            self._cond.notify_all()
            return True

    def wait_for_leadership(self, timeout: float | None = None) -> bool:
        """Block until we lead (``True``) or ``timeout`` passes or we stop (``False``)."""
        deadline = None if timeout is None else self._clock.now() + timeout
        with self._cond:
            while self._leading_epoch is None and not self._stopping:
                if deadline is not None and self._clock.now() >= deadline:
                    return False
                self._clock.wait(self._cond, deadline)
            return self._leading_epoch is not None

    def __enter__(self) -> LeaderElector:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # --- election thread -------------------------------------------------------------------------

    def _extra(self, epoch: int | None = None) -> dict[str, object]:
        extra: dict[str, object] = {"lease": self._lease.key, "holder": self._lease.holder}
        if epoch is not None:
            extra["epoch"] = epoch
        return extra

    def _attempt(self) -> LeaseStatus | None:
        """One acquire-or-renew; ``None`` (logged, throttled) when Redis fails."""
        try:
            status = self._lease.try_acquire_or_renew()
        except Exception as error:  # any failure is a failed attempt, never a dead elector
            self._errors.failure(
                f"lease {self._lease.key}: acquire/renew failed", error, self._extra()
            )
            return None
        self._errors.success(f"lease {self._lease.key}: Redis answers again", self._extra())
        return status

    def _release(self, epoch: int) -> None:
        try:
            if self._lease.release():
                log.info("released lease %s", self._lease.key, extra=self._extra(epoch))
        except Exception as error:  # it will expire on its own
            log.warning(
                "could not release lease %s (it will expire): %r",
                self._lease.key,
                error,
                extra=self._extra(epoch),
            )

    def _sleep_until(self, deadline: float) -> None:
        """Wait until ``deadline`` (clock time), or less if :meth:`stop` is called."""
        with self._cond:
            while not self._stopping and self._clock.now() < deadline:
                self._clock.wait(self._cond, deadline)

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._stopping:
                    return
            started = self._clock.now()
            status = self._attempt()
            if status is not None and status.held:
                if status.epoch <= self._retired_epoch:
                    # Our own fenced leftover (its release failed earlier): free it, don't lead.
                    self._release(status.epoch)
                else:
                    self._lead(status.epoch, started)
            jittered = self._retry_period * (1 + random.random() * JITTER_FACTOR)
            self._sleep_until(self._clock.now() + jittered)

    def _lead(self, epoch: int, renewed_at: float) -> None:
        """Lead with ``epoch`` until leadership ends; returns as a candidate."""
        stop_leading = threading.Event()
        work_done = threading.Event()
        worker = threading.Thread(
            target=self._run_leading,
            args=(epoch, stop_leading, work_done),
            name=f"leader-work[{self._lease.key}]#{epoch}",
            daemon=False,
        )
        with self._cond:
            stopping = self._stopping
            if not stopping:
                self._leading_epoch = epoch
                self._stop_leading = stop_leading
                self._step_down_requested = False
                self._worker = worker
                self._cond.notify_all()
        if stopping:  # stop() raced with the acquire: give the lease straight back
            if self._release_on_stop:
                self._release(epoch)
            return
        log.info("started leading %s", self._lease.key, extra=self._extra(epoch))
        worker.start()
        reason, may_hold, renewed_at = self._renew_loop(epoch, renewed_at, work_done)
        with self._cond:
            self._leading_epoch = None
            self._step_down_requested = False
            stop_leading.set()
            release = may_hold and (self._release_on_stop or not self._stopping)
        log.info("stopping leading %s: %s", self._lease.key, reason, extra=self._extra(epoch))
        self._join_worker(worker, renewed_at)
        if release:
            self._release(epoch)
        with self._cond:
            self._worker = None
            self._stop_leading = None
        try:
            self._on_stopped()
        except Exception:
            log.exception("on_stopped_leading failed", extra=self._extra(epoch))

    def _renew_loop(
        self, epoch: int, renewed_at: float, work_done: threading.Event
    ) -> tuple[str, bool, float]:
        """Renew until leadership ends.

        Returns why it ended, whether the lease may still be ours (so we should release it), and
        when the last successful renewal started (the lease lives ``duration`` from then at
        least: Redis starts counting only when the script runs).
        """
        next_attempt = renewed_at + self._retry_period
        while True:
            with self._cond:
                deadline = renewed_at + self._renew_deadline
                if not (self._stopping or self._step_down_requested or work_done.is_set()):
                    self._clock.wait(self._cond, min(next_attempt, deadline))
                if self._stopping:
                    return "stopping", True, renewed_at
                if self._step_down_requested:
                    return "stepped down (fenced)", True, renewed_at
            if work_done.is_set():
                return "the leading callback returned", True, renewed_at
            now = self._clock.now()
            if now - renewed_at > self._renew_deadline:
                return (
                    f"could not renew for {now - renewed_at:.1f} s (renew deadline)",
                    True,
                    renewed_at,
                )
            if now < next_attempt:
                continue
            next_attempt = now + self._retry_period
            status = self._attempt()
            if status is None:
                continue
            if not status.held:
                return (
                    f"lease taken by {status.holder} with epoch {status.epoch}",
                    False,
                    renewed_at,
                )
            if status.epoch != epoch:
                # The lease lapsed and our renewal re-acquired it: someone may have led in
                # between, so this leadership is over; lead again with the new epoch.
                return (
                    f"lease lapsed and was re-acquired with epoch {status.epoch}",
                    True,
                    renewed_at,
                )
            renewed_at = now

    def _join_worker(self, worker: threading.Thread, renewed_at: float) -> None:
        """Wait for the leading callback; warn once if it outlives the lease (fencing remains)."""
        expires = renewed_at + self._lease.duration
        worker.join(max(0.0, expires - self._clock.now()))
        if worker.is_alive():
            log.warning(
                "the leading callback of %s is still running after the lease may have expired; "
                "another replica may lead now, only fencing protects its writes",
                self._lease.key,
                extra=self._extra(),
            )
            worker.join()

    def _run_leading(
        self, epoch: int, stop_leading: threading.Event, work_done: threading.Event
    ) -> None:
        try:
            self._on_started(epoch, stop_leading)
        except redis.RedisError as error:
            # Redis failing (or failing over: a MOVED slot, a replica shortfall) as the leader
            # starts is the environment, not a bug: one line, then the loop leads again.
            log.warning("the leading callback failed on Redis: %s: %s", type(error).__name__,
                        str(error).replace("\n", " "), extra=self._extra(epoch))  # fmt: skip
        except Exception:
            log.exception("the leading callback failed", extra=self._extra(epoch))
        finally:
            with self._cond:
                work_done.set()
                self._cond.notify_all()
