"""Example handlers, shown in docs/handlers.md and run by the tests so the docs stay true.

* :mod:`.pod_phase_counter`: a plain handler (a class the processor calls with its context) that
  answers from the lister's index instead of counting events, so replays cannot skew it.
* :mod:`.replica_checker`: a :class:`~processor_svc.controller.Controller` that reconciles
  Deployments through a workqueue.
"""

__all__: list[str] = []
