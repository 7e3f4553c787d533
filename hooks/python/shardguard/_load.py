"""Reading a saved state back: the state tree rebuilt with its tensors, on any world size.

Every rank gets rank 0's global state whole (replicated and sharded tensors assembled from
whatever chunks wrote them), or only the boxes it asks for: `boxes` maps a tensor name to
(offsets, sizes), or is a function (TensorInfo) -> (offsets, sizes) or None, such as
dim0_boxes(rank, world) for a model sharded by rows; a `template` holding a Chunk or a
ShardedTensor where one was saved has that leaf's own box read into it in place. Tensors
come back as torch tensors where torch tensors were saved (numpy where numpy was). The
rank's own state is its saved rank_state, or {} for a rank that did not exist when the
checkpoint was written. Checkpoints written without trees (by the C++ or C clients, or an
older package) come back as {tensor name: array}. Pure reads; one thread. The tensors' bytes
are read in batches (Reader.read_into), so that a load from a bucket keeps its requests in
flight across tensors.
"""

import collections
import sys

from . import _dtypes, _plan, _tree

MARK = "__shardguard_py__"

# What a `boxes` function is told about each tensor.
TensorInfo = collections.namedtuple("TensorInfo", ["name", "path", "shape", "dtype", "layout"])


def dim0_boxes(rank, world):
    """A `boxes` function for models sharded by rows: each tensor saved as "sharded" with
    at least one dimension is read as this rank's dim-0 rows [r*n//world, (r+1)*n//world)
    (the split that _plan and a hand-written row-sharded model use); everything else whole."""
    def box(info):
        if info.layout != "sharded" or not info.shape:
            return None
        r0, r1 = _plan.dim0_rows(info.shape[0], rank, world)
        return (r0,) + (0,) * (len(info.shape) - 1), (r1 - r0,) + tuple(info.shape[1:])
    return box


def _at(template, path):
    node = template
    for key in path:
        try:
            node = node[key]
        except (KeyError, IndexError, TypeError):
            return None
    return node


def _want_torch(ref, as_torch):
    if as_torch is not None:
        return bool(as_torch)
    if ref.get("lib") != "torch":
        return False
    if "torch" not in sys.modules:
        import torch  # noqa: F401 (saved from torch: given back as torch)
    return True


def _fill_in_place(dst, src):
    if _tree.is_torch_tensor(dst):
        import torch
        with torch.no_grad():
            dst.copy_(src if _tree.is_torch_tensor(src) else torch.from_numpy(src))
    else:
        dst[...] = src.numpy() if _tree.is_torch_tensor(src) else src


# Bytes of temporary arrays (boxes copied into a template afterwards) one batch of reads
# may hold: the reads of a batch run together, and their copies wait for the batch.
_BATCH_TEMP_BYTES = 256 << 20


class _Fetcher:
    """Gives each tensor leaf its array at once (allocated, not yet read) and reads them in
    batches (Reader.read_into), so that a bucket's ranged GETs stay in flight across
    tensors; flush() reads what is pending and copies boxes into the template's tensors."""

    def __init__(self, reader, boxes, as_torch, template):
        self.reader, self.boxes, self.as_torch = reader, boxes, as_torch
        self.template = template
        self.pending, self.copies, self.temp_bytes = [], [], 0

    def __call__(self, ref, path):
        name = ref["$tensor"]
        layout = ref.get("layout", "replicated")
        to_torch = _want_torch(ref, self.as_torch)
        target = _at(self.template, path) if self.template is not None else None
        if target is not None and _tree.is_sharded_tensor(target):
            for shard in target.local_shards():
                box = (tuple(shard.metadata.shard_offsets), tuple(shard.metadata.shard_sizes))
                self.read_then_copy(name, box, to_torch, shard.tensor)
            return target
        if target is not None and _tree.is_chunk(target):
            sizes = tuple(target.value.shape)
            self.read_then_copy(name, (tuple(target.offsets), sizes), to_torch, target.value)
            return target.value
        dtype, shape = self.reader.info(name)
        return self.read(name, self.box_for(TensorInfo(name, path, shape, dtype, layout)),
                         to_torch)

    def box_for(self, info):
        if self.boxes is None:
            return None
        if callable(self.boxes):
            return self.boxes(info)
        return self.boxes.get(info.name)

    def read(self, name, box, to_torch):
        """The box's array (a torch view of it with to_torch), filled at the next flush."""
        offsets, sizes = box if box is not None else (None, None)
        offsets, sizes, out, dtype = self.reader.empty_box(name, offsets, sizes)
        self.pending.append((name, offsets, sizes, out))
        return _dtypes.as_torch(out, dtype) if to_torch else out

    def read_then_copy(self, name, box, to_torch, dst):
        src = self.read(name, box, to_torch)
        self.copies.append((dst, src))
        self.temp_bytes += self.pending[-1][3].nbytes
        if self.temp_bytes >= _BATCH_TEMP_BYTES:
            self.flush()

    def flush(self):
        pending, copies = self.pending, self.copies
        self.pending, self.copies, self.temp_bytes = [], [], 0
        self.reader.read_into(pending)
        for dst, src in copies:
            _fill_in_place(dst, src)


Loaded = collections.namedtuple("Loaded", ["state", "rank_state", "rank_state_saved"])


def read_state(reader, rank, boxes=None, as_torch=None, template=None):
    """Loaded(state, rank_state, rank_state_saved) of `rank` from an open Reader."""
    fetch = _Fetcher(reader, boxes, as_torch, template)
    loaded = _read_state(reader, rank, fetch)
    fetch.flush()  # every leaf's array filled before the state is handed out
    return loaded


def _read_state(reader, rank, fetch):
    tree = reader.global_tree()
    own = rank < reader.world_size
    _, _, user = reader.rank_state(rank) if own else (None, None, None)
    ours = isinstance(user, dict) and user.get(MARK) == 1
    if tree is None:
        return _legacy(reader, fetch, user, ours)
    state = _tree.unflatten(tree, fetch)
    rank_tree = reader.rank_tree(rank) if own else None
    if rank_tree is not None:
        return Loaded(state, _tree.unflatten(rank_tree, fetch), True)
    extra = user.get("extra") if ours else None
    return Loaded(state, extra if extra is not None else {}, extra is not None)


def _legacy(reader, fetch, user, ours):
    """A checkpoint without a tree: {name: tensor}, torch where the saver said so; the rank
    state is the saved extra_state (this package) or the rank's user JSON (other clients)."""
    torch_names = set(user.get("torch", [])) if ours else set()
    state = {}
    for name in reader.names():
        if name.startswith("@rank"):
            continue
        ref = {"$tensor": name, "lib": "torch" if name in torch_names else "numpy"}
        state[name] = fetch(ref, (name,))
    extra = user.get("extra") if ours else user
    return Loaded(state, extra if extra is not None else {}, extra is not None)
