"""Where the repository is, for tests that read its files or run its commands."""

from __future__ import annotations

from pathlib import Path

__all__ = ["ROOT"]

ROOT = Path(__file__).resolve().parents[2]
"""The repository's root (the directory holding ``pyproject.toml``)."""
