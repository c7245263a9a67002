"""``with`` for the app layer's long-lived things, written once.

What is ready once built and must be closed (a subscription) gets a base class whose
``__enter__`` / ``__exit__`` call the method the subclass already has, so ``with`` means the same
everywhere: the way out runs whether the block raised or not, and never swallows the exception
(``__exit__`` returns ``None``, whatever ``exc_info`` holds).
"""

from __future__ import annotations

import abc
from typing import Self

__all__ = ["Closing"]


class Closing(abc.ABC):
    """``with thing:`` gives the thing, then ``thing.close()`` on the way out."""

    @abc.abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
