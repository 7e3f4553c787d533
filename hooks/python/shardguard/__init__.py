"""shardguard: preemption-aware checkpoints for Python trainers (PyTorch, numpy).

Pure Python over libshardguard.so (found through $SHARDGUARD_LIB, the path written at
install time, next to this package, or in a source checkout's build directories). See
Checkpointer for the five-line integration and what save() takes, DataPosition for exact
mid-epoch resume of a DataLoader, and PreemptionGuard for catching the checkpoint signal in
Python.
"""

from ._collective import SaveRefused
from ._lib import API_VERSION, LibraryNotFound, ShardguardError
from ._load import TensorInfo, dim0_boxes
from ._plan import dim0_rows
from .checkpointer import (EXIT_AFTER_EMERGENCY, EXIT_RESUME_FAILED, Checkpointer, Chunk,
                           Restored, ResumeFailed)
from .data import DataPosition
from .guard import PreemptionGuard
from .reader import Reader

__all__ = [
    "API_VERSION", "Checkpointer", "Chunk", "DataPosition", "EXIT_AFTER_EMERGENCY",
    "EXIT_RESUME_FAILED", "LibraryNotFound", "PreemptionGuard", "Reader", "Restored",
    "ResumeFailed", "SaveRefused", "ShardguardError", "TensorInfo", "dim0_boxes", "dim0_rows",
]
