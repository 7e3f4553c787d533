"""shardguard: preemption-aware checkpoints for Python trainers (numpy and torch).

Pure Python over libshardguard.so (found through $SHARDGUARD_LIB, next to this package, or
in a source checkout's build directories). See Checkpointer for the five-line integration
and PreemptionGuard for catching the checkpoint signal in Python.
"""

from ._lib import API_VERSION, LibraryNotFound, ShardguardError
from .checkpointer import EXIT_AFTER_EMERGENCY, Checkpointer, Chunk
from .guard import PreemptionGuard
from .reader import Reader

__all__ = [
    "API_VERSION", "Checkpointer", "Chunk", "EXIT_AFTER_EMERGENCY", "LibraryNotFound",
    "PreemptionGuard", "Reader", "ShardguardError",
]
