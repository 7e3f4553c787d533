"""Tensor leaves of a state tree -> what this rank adds to its shard.

describe() gives each leaf's dtype, global shape and size (for the write plan and the
ranks' meeting); add_leaves() hands this rank's parts to the library writer: its share of
the replicated tensors (the plan of _plan.py), its chunks of sharded ones (Chunk, the local
shards of a ShardedTensor), and its rank-local tensors. Errors name the key path. Pure but
for the writer calls; one thread.
"""

import collections
import ctypes

from . import _dtypes, _plan, _tree
from ._lib import check, lib, u64_array

# A leaf with what the plan and the meeting need: name, layout, safetensors dtype, global
# shape, bytes of the global tensor, and the Leaf itself.
Info = collections.namedtuple("Info", ["name", "layout", "dtype", "shape", "nbytes", "leaf"])


def _dtype_and_shape(value):
    if _tree.is_torch_tensor(value):
        return _dtypes.torch_st_dtype(value.dtype), tuple(value.shape), value.element_size()
    st, shape, itemsize = _dtypes.numpy_st_dtype(value)
    return st, shape, itemsize


def describe(leaf, where):
    """Info of one Leaf; TypeError naming `where` (the key path) for an unsupported dtype."""
    try:
        value = leaf.value
        if _tree.is_chunk(value):
            dtype, local, itemsize = _dtype_and_shape(value.value)
            shape = tuple(int(d) for d in value.global_shape)
            if len(shape) != len(local) or len(value.offsets) != len(local):
                raise ValueError("a chunk of %d dims with global shape %s and offsets %s"
                                 % (len(local), list(shape), list(value.offsets)))
        elif _tree.is_sharded_tensor(value):
            meta = value.metadata()
            dtype = _dtypes.torch_st_dtype(meta.tensor_properties.dtype)
            shape = tuple(int(d) for d in meta.size)
            itemsize = _element_size(meta.tensor_properties.dtype)
        else:
            dtype, shape, itemsize = _dtype_and_shape(value)
    except (TypeError, ValueError) as e:
        raise type(e)("shardguard: %s: %s" % (where, str(e).replace("shardguard: ", ""))) from None
    n = 1
    for d in shape:
        n *= d
    return Info(leaf.name, leaf.layout, dtype, shape, n * itemsize, leaf)


def _element_size(torch_dtype):
    import torch
    return torch.empty((), dtype=torch_dtype).element_size()


def _add_whole(writer, name, value, keep):
    dtype, shape, array = _dtypes.to_bytes(value)
    keep.append(array)
    dims, n = u64_array(shape)
    check(lib.sg_writer_add_tensor(writer, name.encode(), dtype.encode(), n, dims,
                                   array.ctypes.data_as(ctypes.c_void_p), array.nbytes))


def _add_box(writer, name, value, global_shape, offsets, keep):
    dtype, shape, array = _dtypes.to_bytes(value)
    keep.append(array)
    gshape, n = u64_array(global_shape)
    offs, _ = u64_array(offsets)
    sizes, _ = u64_array(shape)
    check(lib.sg_writer_add_chunk(writer, name.encode(), dtype.encode(), n, gshape, offs, sizes,
                                  array.ctypes.data_as(ctypes.c_void_p), array.nbytes))


def _rows(value, r0, r1):
    if _tree.is_torch_tensor(value):
        return value.detach()[r0:r1]
    import numpy as np
    return np.asarray(value)[r0:r1]


def add_leaves(writer, infos, plan_rank, plan_world, split_bytes, keep):
    """Adds this rank's parts of every leaf to `writer`; `keep` collects the arrays the
    library reads until the save returns. The replicated tensors are split over plan_world
    ranks, this one being plan_rank (None: it writes none of them). Returns its parts."""
    replicated = {i.name: i for i in infos if i.layout == "replicated"}
    parts = []
    if plan_rank is not None:
        parts = _plan.plan([(i.name, i.shape, i.nbytes) for i in replicated.values()],
                           plan_world, split_bytes)[plan_rank]
    for part in parts:
        info = replicated[part.name]
        value = info.leaf.value
        if part.whole:
            _add_whole(writer, part.name, value, keep)
        else:
            offsets = (part.row0,) + (0,) * (len(info.shape) - 1)
            _add_box(writer, part.name, _rows(value, part.row0, part.row1), info.shape,
                     offsets, keep)
    for info in infos:
        value = info.leaf.value
        if info.layout == "rank":
            _add_whole(writer, info.name, value, keep)
        elif info.layout == "sharded" and _tree.is_chunk(value):
            _add_box(writer, info.name, value.value, info.shape, value.offsets, keep)
        elif info.layout == "sharded":  # a ShardedTensor: each local shard is a chunk
            for shard in value.local_shards():
                _add_box(writer, info.name, shard.tensor, info.shape,
                         shard.metadata.shard_offsets, keep)
    return parts
