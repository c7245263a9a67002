"""``with`` for the app layer's long-lived things, written once.

Two shapes recur: what must be started and stopped (the simulator, in this process or as a
child) and what is ready once built and must be closed (a subscription). Each gets a base
class whose ``__enter__`` / ``__exit__`` call the methods the subclass already has, so ``with``
means the same everywhere: the way out runs whether the block raised or not, and never
swallows the exception (``__exit__`` returns ``None``, whatever ``exc_info`` holds).
"""

from __future__ import annotations

import abc
from typing import Self

__all__ = ["Closing", "StartStop"]


class StartStop(abc.ABC):
    """``with thing:`` is ``thing.start()``, then ``thing.stop()`` on the way out."""

    @abc.abstractmethod
    def start(self) -> Self: ...

    @abc.abstractmethod
    def stop(self) -> object: ...

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


class Closing(abc.ABC):
    """``with thing:`` gives the thing, then ``thing.close()`` on the way out."""

    @abc.abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
