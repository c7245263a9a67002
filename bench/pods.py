"""Realistic Pods for the micro-benchmarks, from the simulator's own fixture generator.

One generator for the whole project, so benchmarks and the simulator measure the same shape
(~3.5 KB of JSON with managedFields, ownerReferences, two containers' worth of spec and status).
"""

from __future__ import annotations

import random
from typing import Any

from apiserver_sim.fixtures import make_object
from apiserver_sim.resources import PODS


def sample_pod(index: int = 12345, seed: int = 7, namespace: str = "ns-07") -> dict[str, Any]:
    """Pod number ``index`` as the API server would return it (with a resourceVersion)."""
    pod = make_object(PODS, random.Random(seed * 1_000_003 + index), index, namespace)
    pod["metadata"]["resourceVersion"] = str(1_000_000 + index)
    return pod
