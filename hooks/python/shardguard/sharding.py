"""Helpers for models whose parameters are sharded across ranks by hand (FSDP-like, ZeRO).

Each rank holds a piece of each parameter and the optimizer state of that piece. To save:
describe the pieces as Chunks (the model's own rows, with the global shape and offsets)
and wrap the optimizer's state the same way with chunk_optimizer_state(); every rank calls
save() with them. To load on any world size: load(boxes=dim0_boxes(rank, world)) reads each
rank's own rows of every sharded tensor (for row-sharded models), and the optimizer's
load_state_dict() takes the result as it is. Pure functions.
"""

from ._load import dim0_boxes
from ._plan import dim0_rows
from ._tree import is_torch_tensor
from .checkpointer import Chunk


def chunk_optimizer_state(optim_state, param_chunks):
    """optimizer.state_dict() of an optimizer over local shards, with every state tensor
    shaped like its parameter's shard wrapped as a Chunk of the parameter's global tensor.
    param_chunks[i] is the Chunk of parameter i (the numbering of the state dict's
    "params" lists), or None for a parameter every rank holds whole. Other entries (Adam's
    scalar "step") stay as they are: the same on every rank."""
    state = {}
    for index, entries in optim_state["state"].items():
        chunk = param_chunks[index]
        out = {}
        for key, value in entries.items():
            if chunk is not None and is_torch_tensor(value) and value.dim() > 0 and \
                    tuple(value.shape) == tuple(chunk.value.shape):
                out[key] = Chunk(value, chunk.global_shape, chunk.offsets)
            else:
                out[key] = value
        state[index] = out
    return {"state": state, "param_groups": optim_state["param_groups"]}


__all__ = ["chunk_optimizer_state", "dim0_boxes", "dim0_rows"]
