"""Who writes which part of the replicated tensors (DDP: every rank holds the same state).

Each replicated tensor is written once in total. Large ones (at least `split_bytes`, with at
least one row per rank) are cut into dim-0 chunks, rank r taking rows
[r*n//world, (r+1)*n//world); the rest go whole, largest first, to the rank with the fewest
bytes so far (ties: the lowest rank). The plan depends only on the names, shapes and sizes,
which every rank has alike, so every rank computes the same plan without talking to the
others; the chunks it produced are recorded in the manifest like any others, and a load
reads whole tensors or any box whatever the plan was. Pure functions.
"""

import collections

# Split tensors from this size up (bytes): below it a chunk per rank costs more in headers
# and manifest entries than it saves in balance.
DEFAULT_SPLIT_BYTES = 1 << 20

# One rank's part of a replicated tensor: rows [row0, row1) of dim 0, or whole.
Part = collections.namedtuple("Part", ["name", "whole", "row0", "row1"])


def plan(tensors, world, split_bytes=DEFAULT_SPLIT_BYTES):
    """tensors: iterable of (name, shape, nbytes). Returns a list, per rank, of Parts."""
    if world < 1:
        raise ValueError("world size must be at least 1")
    tensors = sorted(tensors, key=lambda t: t[0])
    parts = [[] for _ in range(world)]
    load = [0] * world
    small = []
    for name, shape, nbytes in tensors:
        rows = shape[0] if len(shape) else 0
        if world > 1 and nbytes >= split_bytes and rows >= world:
            for r in range(world):
                r0, r1 = r * rows // world, (r + 1) * rows // world
                parts[r].append(Part(name, False, r0, r1))
                load[r] += nbytes * (r1 - r0) // rows
        else:
            small.append((name, nbytes))
    for name, nbytes in sorted(small, key=lambda t: (-t[1], t[0])):
        r = min(range(world), key=lambda i: (load[i], i))
        parts[r].append(Part(name, True, 0, 0))
        load[r] += nbytes
    return parts


def dim0_rows(rows, rank, world):
    """Rows [row0, row1) of `rows` that rank `rank` of `world` holds in the dim-0 split that
    plan() and dim0_boxes() use."""
    return rank * rows // world, (rank + 1) * rows // world
