"""``informer-bus demo`` (``make demo``): the whole pipeline on one machine, with a live view.

It starts real processes, the same commands a deployment runs: a private ``redis-server`` (or
the Redis at ``--redis-url`` / ``$REDIS_URL``), the API server simulator populated with a few
thousand pods and steady churn (or, with ``--kubeconfig``, a real cluster instead), one
reflector, and processors running the example handler
``informer_bus.examples.pod_phase_counter:PodPhaseCounter``. Their logs go to files in a
directory printed at start, so the terminal shows only the view.

The view is :mod:`informer_bus.status` read once a second (the facts all live in Redis), plus
each processor's ``/readyz`` (whether its caches finished their initial list, which only the
processor knows) and event rates from two consecutive reads. On a terminal it is redrawn in
place with plain ANSI codes; otherwise (CI, a pipe) it is one line per second.

A dead processor is what the demo exists to show, so once the pipeline is up it does not end
the demo (at startup a child that cannot start ends it, with that child's own error). The demo
says once which processor died, how and where its log is, shows its shards waiting for their
leases to expire and being taken over by the survivors, then restarts it (after a short
backoff) and, once the shards rebalanced, says which ones each processor owns, as the leases in
Redis say (rarely the ones it had: the assignment is sticky, the survivors keep what they may).
"Synced" in the view means every shard is held by a running processor whose caches are synced:
a dead processor's unexpired leases hold nothing, and one that holds no shard is not waited
for. A processor that dies again and again
before its caches sync is not restarted forever: after :data:`MAX_FAILED_STARTS` such deaths
in a row the demo says so and goes on with the others (or stops, exit 1, when none is left).
The death of Redis, the simulator or the reflector ends the demo: nothing could be shown
without them.

Why every child runs in a process group of its own: a Ctrl-C in the terminal would otherwise
reach all of them at once, and Redis would vanish under processors that are still
acknowledging. The demo gets the signal alone (Ctrl-C, SIGTERM, or SIGHUP when its terminal
closes) and stops the processors and the reflector first (SIGTERM: they drain and hand their
leases back), then the simulator, then Redis. A terminal that closed makes every later write
fail, so output errors are swallowed rather than allowed to cut that shutdown short. Under
``nohup`` (SIGHUP ignored when the demo starts) a hangup stays ignored.

Why the children also die with a demo that had no chance to stop them (``kill -9``, a crash of
the interpreter): each is started with Linux's parent-death signal (SIGKILL), see
:mod:`informer_bus.child_process`. The kernel ties it to the thread that started the child, so
every child, restarted processors included, is started from the main thread.

Why a key prefix of its own on a Redis it did not start (``ib-demo-<random>``): that Redis may
hold a real pipeline's keys under ``ib``, and a demo reflector must never compete with a real
one. Those keys are deleted when the demo stops.

Exit status: 0 after ``--duration`` or on Ctrl-C / SIGTERM / SIGHUP once every child stopped
cleanly (processors that died and were restarted do not count against it); 1 when Redis, the
simulator or the reflector died, a processor was given up, or a child failed to stop or had to
be killed; 2 for a mistake (bad flag, no ``redis-server`` binary, unreachable Redis,
unreadable kubeconfig, a child refusing its settings).

The package, one idea per module: :mod:`.settings` (the flags), :mod:`.children` (a child
process of the demo and what it said), :mod:`.view` (the live view), :mod:`.supervisor`
(startup, supervision, ordered shutdown) and :mod:`.command` (the subcommand).
"""
