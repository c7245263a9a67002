"""Load user code named ``module:attribute`` — only ever from configuration.

Handlers, transforms and factories are named by the operator on the command line or in the
environment. Nothing read from a stream or from the Kubernetes API ever names code to load:
that would let anyone who can write an object run code in our processes.

The module is found as ``python -m`` finds one: the current working directory comes first on
``sys.path`` (``--handler myhandler:MyHandler`` with ``myhandler.py`` where the command runs),
then ``PYTHONPATH`` and the installed packages. When the user's code fails -- importing it, or
later constructing what it names -- :func:`user_traceback` keeps the traceback of their own
frames (file, line, code), without informer-bus's and the import machinery's.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback
from pathlib import Path
from typing import Any, Final

__all__ = ["PluginError", "load_plugin", "user_traceback", "working_directory_on_path"]

_ROOT: Final = Path(__file__).resolve().parents[1]
_OURS: Final = tuple(
    str(_ROOT / package) + os.sep
    for package in ("common", "processor_svc", "reflector_svc", "informer_bus")
)
"""Where informer-bus's own frames are (a user's code never lives in these packages)."""
_IMPORT_MACHINERY: Final = (str(Path(importlib.__file__).parent) + os.sep, "<frozen importlib")


class PluginError(ValueError):
    """A ``module:attribute`` reference that cannot be loaded; the message is one line, and
    :attr:`user_traceback` the traceback of the user's code that failed (``""`` if none)."""

    def __init__(self, message: str, *, user_traceback: str = "") -> None:
        super().__init__(message)
        self.user_traceback = user_traceback


def working_directory_on_path() -> None:
    """Put the current working directory first on ``sys.path``, as ``python -m`` does (the
    ``informer-bus`` script's own directory is there instead)."""
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)


def _is_users(filename: str) -> bool:
    return not filename.startswith(_OURS + _IMPORT_MACHINERY)


def user_traceback(error: BaseException) -> str:
    """``error``'s traceback in the user's own code: their frames only, then the final
    ``Type: message`` line; ``""`` when none of its frames is theirs (their module is not
    found, say). A syntax error in their file names it, line and column, in that last line."""
    frames = [
        frame for frame in traceback.extract_tb(error.__traceback__) if _is_users(frame.filename)
    ]
    in_their_file = isinstance(error, SyntaxError) and _is_users(error.filename or "")
    if not frames and not in_their_file:
        return ""
    head = (
        ["Traceback (most recent call last):\n", *traceback.format_list(frames)] if frames else []
    )
    return "".join([*head, *traceback.format_exception_only(type(error), error)])


def load_plugin(reference: str) -> Any:
    """Import ``module`` (from the working directory too) and return its (possibly dotted)
    ``attribute``."""
    module_name, sep, attribute = reference.partition(":")
    if not sep or not module_name or not attribute:
        raise PluginError(
            f"expected MODULE:ATTRIBUTE (e.g. mypkg.handlers:on_pod), got {reference!r}"
        )
    working_directory_on_path()
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        name = exc.name if isinstance(exc, ModuleNotFoundError) else None
        missing = name is not None and (module_name + ".").startswith(name + ".")
        where = f" (looked in {os.getcwd()} and on PYTHONPATH)" if missing else ""
        raise PluginError(
            f"cannot import module {module_name!r} for {reference!r}: {exc}{where}",
            user_traceback=user_traceback(exc),
        ) from None
    except Exception as exc:  # the user's module raised while importing
        raise PluginError(
            f"importing {module_name!r} for {reference!r} failed: {type(exc).__name__}: {exc}",
            user_traceback=user_traceback(exc),
        ) from exc
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise PluginError(f"{module_name!r} has no attribute {attribute!r}") from None
    return target
