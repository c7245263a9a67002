"""Load user code named ``module:attribute`` — only ever from configuration.

Handlers, transforms and factories are named by the operator on the command line or in the
environment. Nothing read from a stream or from the Kubernetes API ever names code to load:
that would let anyone who can write an object run code in our processes.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["PluginError", "load_plugin"]


class PluginError(ValueError):
    """A ``module:attribute`` reference that cannot be loaded; the message is one line."""


def load_plugin(reference: str) -> Any:
    """Import ``module`` and return its (possibly dotted) ``attribute``."""
    module_name, sep, attribute = reference.partition(":")
    if not sep or not module_name or not attribute:
        raise PluginError(
            f"expected MODULE:ATTRIBUTE (e.g. mypkg.handlers:on_pod), got {reference!r}"
        )
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise PluginError(
            f"cannot import module {module_name!r} for {reference!r}: {exc}"
        ) from None
    except Exception as exc:  # the user's module raised while importing
        raise PluginError(
            f"importing {module_name!r} for {reference!r} failed: {type(exc).__name__}: {exc}"
        ) from exc
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise PluginError(f"{module_name!r} has no attribute {attribute!r}") from None
    return target
