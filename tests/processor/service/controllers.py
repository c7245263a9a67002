"""A controller loaded the way users load theirs (``--handler module:Class``)."""

from __future__ import annotations

import threading

from processor_svc.controller import Controller
from processor_svc.watches import For, Owns

RECONCILED: set[str] = set()
LOCK = threading.Lock()


class KeyCollector(Controller):
    """Remembers every key it reconciled (workers only run if the processor starts them)."""

    workers = 2

    def reconcile(self, key: str) -> None:
        with LOCK:
            RECONCILED.add(key)


class PodsOwningConfigMaps(Controller):
    """Declares its resources: pods, and the configmaps it owns (nothing more to do here)."""

    pods = For("pods")
    config_maps = Owns("configmaps")

    def reconcile(self, key: str) -> None:
        with LOCK:
            RECONCILED.add(key)
