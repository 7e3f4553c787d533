"""Reader: a committed checkpoint open for reading, over the C ABI.

Any box of any tensor can be read (assembled from every chunk that overlaps it), whatever
world size wrote it. Thread-safety: a Reader may be used from several threads at once.
"""

import ctypes
import json

import numpy as np

from . import _dtypes
from ._lib import ReadSpec, check, lib, text, u64_array


class Reader:
    """A checkpoint: use Reader.open(path) (a step directory or its manifest.json)."""

    def __init__(self, handle):
        self._h = handle

    @classmethod
    def open(cls, path):
        out = ctypes.c_void_p()
        check(lib.sg_reader_open(str(path).encode(), ctypes.byref(out)))
        return cls(out)

    def close(self):
        if self._h:
            lib.sg_reader_free(self._h)
            self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()

    @property
    def step(self):
        return lib.sg_reader_step(self._h)

    @property
    def world_size(self):
        return lib.sg_reader_world_size(self._h)

    @property
    def job_id(self):
        return text(lib.sg_reader_job_id(self._h))

    def names(self):
        """Tensor names, sorted."""
        return [text(lib.sg_reader_tensor_name(self._h, i))
                for i in range(lib.sg_reader_tensor_count(self._h))]

    def info(self, name):
        """(safetensors dtype name, global shape tuple) of a tensor."""
        dtype, ndim = ctypes.c_char_p(), ctypes.c_size_t()
        shape = ctypes.POINTER(ctypes.c_uint64)()
        check(lib.sg_reader_tensor_info(self._h, name.encode(), ctypes.byref(dtype),
                                        ctypes.byref(ndim), ctypes.byref(shape)))
        return text(dtype.value), tuple(shape[i] for i in range(ndim.value))

    def read(self, name, offsets=None, sizes=None, as_torch=False):
        """The box (offsets, sizes) of tensor `name` (the whole tensor by default) as a numpy
        array (BF16 and F8 as raw unsigned words), or a torch tensor with as_torch."""
        return self.read_many([(name, offsets, sizes)], as_torch)[0]

    def read_many(self, reads, as_torch=False):
        """read() of each (name, offsets, sizes) in `reads` (offsets and sizes None: the
        whole tensor), their bytes read together: from a bucket, ranged GETs stay in flight
        across tensors instead of finishing one tensor before the next starts."""
        planned = [self.empty_box(name, offsets, sizes) for name, offsets, sizes in reads]
        self.read_into([(name, offsets, sizes, out)
                        for (name, _, _), (offsets, sizes, out, _) in zip(reads, planned)])
        return [_dtypes.as_torch(out, dtype) if as_torch else out
                for _, _, out, dtype in planned]

    def empty_box(self, name, offsets=None, sizes=None):
        """(offsets, sizes, out, dtype): the box made explicit and an uninitialised numpy
        array that holds it, for read_into."""
        dtype, shape = self.info(name)
        if offsets is None and sizes is None:
            offsets, sizes = (0,) * len(shape), shape
        out = np.empty(tuple(int(s) for s in sizes), dtype=_dtypes.numpy_dtype(dtype))
        return tuple(offsets), tuple(sizes), out, dtype

    def read_into(self, reads):
        """Fills each C-contiguous numpy array `out` of (name, offsets, sizes, out) in
        `reads` with that box, all read together (one sg_reader_read_many)."""
        if not reads:
            return
        specs = (ReadSpec * len(reads))()
        keep = []  # the arrays the specs point into, alive until the call returns
        for spec, (name, offsets, sizes, out) in zip(specs, reads):
            if not out.flags["C_CONTIGUOUS"]:
                raise ValueError("shardguard: read_into needs a C-contiguous array for %r"
                                 % (name,))
            offs, n = u64_array(offsets)
            szs, _ = u64_array(sizes)
            encoded = name.encode()
            keep += [offs, szs, encoded]
            spec.name, spec.ndim, spec.out, spec.out_size = (
                encoded, n, out.ctypes.data, out.nbytes)
            spec.offsets = ctypes.cast(offs, ctypes.POINTER(ctypes.c_uint64))
            spec.sizes = ctypes.cast(szs, ctypes.POINTER(ctypes.c_uint64))
        check(lib.sg_reader_read_many(self._h, specs, len(reads)))

    def rank_state(self, rank):
        """(rng bytes, data loader position, user state) saved by `rank`; JSON decoded."""
        data, size = ctypes.c_void_p(), ctypes.c_size_t()
        check(lib.sg_reader_rank_rng(self._h, rank, ctypes.byref(data), ctypes.byref(size)))
        rng = ctypes.string_at(data, size.value) if size.value else b""
        position = json.loads(text(lib.sg_reader_rank_data_position(self._h, rank)))
        user = json.loads(text(lib.sg_reader_rank_user(self._h, rank)))
        return rng, position, user

    def global_tree(self):
        """The state tree rank 0 saved (JSON decoded, see _tree.py), or None (a checkpoint
        written without one: by another client, or an older shardguard)."""
        return json.loads(text(lib.sg_reader_global_tree(self._h)))

    def rank_tree(self, rank):
        """Rank `rank`'s own state tree, or None."""
        return json.loads(text(lib.sg_reader_rank_tree(self._h, rank)))

    def checksum_failure(self):
        """(file relative to the step directory, offset of the bad block or None) of the
        first block a read found corrupt, or None."""
        path, offset, has = ctypes.c_char_p(), ctypes.c_uint64(), ctypes.c_int()
        if not lib.sg_reader_checksum_failure(self._h, ctypes.byref(path), ctypes.byref(offset),
                                              ctypes.byref(has)):
            return None
        return text(path.value), (offset.value if has.value else None)

    @property
    def handle(self):
        return self._h

    def global_state(self):
        """{"step", "lr_schedule", "user"} set by rank 0; JSON decoded."""
        return {"step": lib.sg_reader_global_step(self._h),
                "lr_schedule": json.loads(text(lib.sg_reader_global_lr_schedule(self._h))),
                "user": json.loads(text(lib.sg_reader_global_user(self._h)))}
