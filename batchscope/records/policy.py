"""How a server forms batches (the serving what-if's two policies)."""

from __future__ import annotations

from enum import Enum


class Policy(str, Enum):
    """How a server forms batches."""

    STATIC = "static"  # a batch runs until its longest request is done
    CONTINUOUS = "continuous"  # a finished row is refilled at the next step
