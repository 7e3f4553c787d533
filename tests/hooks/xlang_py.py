"""The Python side of the cross-language checkpoint test (see test_xlang.py).

    xlang_py.py write DIR      saves step 42 as this rank (SHARDGUARD_RANK / _WORLD_SIZE)

The tensor table and byte pattern match xlang_tool.cc; BF16, F16, I64 and BOOL tensors go
through torch, the rest through numpy. Needs numpy and torch.
"""

import sys

import numpy as np
import torch

import shardguard

STEP = 42
# Keep in step with kSpecs in xlang_tool.cc: name, dtype, shape, split by rows, via torch.
SPECS = [
    ("f32", "F32", (3, 5), False, False), ("bf16", "BF16", (4, 6), False, True),
    ("f16", "F16", (7,), False, True), ("i64", "I64", (2, 3), False, True),
    ("mask", "BOOL", (9,), False, True), ("u8", "U8", (4,), False, False),
    ("f64", "F64", (2, 2), False, False), ("i32", "I32", (3,), False, False),
    ("scalar", "F32", (), False, False), ("empty", "F32", (0, 3), False, False),
    ("rows_bf16", "BF16", (6, 4), True, True), ("rows_i64", "I64", (4, 2), True, False),
]
_NP = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "BOOL": np.bool_, "U8": np.uint8,
       "F64": np.float64, "I32": np.int32, "BF16": np.int16}
_WIDTH = {"F32": 4, "BF16": 2, "F16": 2, "I64": 8, "BOOL": 1, "U8": 1, "F64": 8, "I32": 4}


def pattern(k, dtype, shape):
    """The global bytes of tensor number k."""
    n = int(np.prod(shape, dtype=np.int64)) * _WIDTH[dtype]
    i = np.arange(n, dtype=np.uint64)
    v = (i * 131 + k * 29 + 7) & 0xFF
    if dtype == "BOOL":
        v = (v >> 3) & 1
    return v.astype(np.uint8).tobytes()


def value(k, dtype, shape, via_torch):
    a = np.frombuffer(bytearray(pattern(k, dtype, shape)), dtype=_NP[dtype]).reshape(shape)
    if not via_torch:
        return a
    t = torch.from_numpy(a.copy())
    return t.view(torch.bfloat16) if dtype == "BF16" else t


def write(directory):
    ckpt = shardguard.Checkpointer(directory)
    rank, world = ckpt.rank, ckpt.world_size
    state = {}
    for k, (name, dtype, shape, split, via_torch) in enumerate(SPECS):
        whole = value(k, dtype, shape, via_torch)
        if split:
            r0, r1 = shape[0] * rank // world, shape[0] * (rank + 1) // world
            offsets = (r0,) + (0,) * (len(shape) - 1)
            state[name] = shardguard.Chunk(whole[r0:r1], shape, offsets)
        elif rank == 0:
            state[name] = whole
    ckpt.save(STEP, state, extra_state={"rank": rank},
              data_position={"epoch": 1, "index": rank}, lr_schedule={"lr": 0.25},
              global_state={"writer": "python"}, reason="manual")
    ckpt.close()


def rng_bytes(rank):
    return bytes((rank * 7 + j) & 0xFF for j in range(40))


def check(directory, writer):
    """Raises AssertionError on the first difference from what `writer` (python or cxx)
    saved."""
    with shardguard.Reader.open(directory + "/step-%09d" % STEP) as r:
        assert r.names() == sorted(s[0] for s in SPECS), r.names()
        for k, (name, dtype, shape, split, _) in enumerate(SPECS):
            assert r.info(name) == (dtype, shape), (name, r.info(name))
            expected = pattern(k, dtype, shape)
            got = r.read(name)
            assert got.shape == shape and got.tobytes() == expected, name
            t = r.read(name, as_torch=True)
            raw = t.view(torch.int16) if dtype == "BF16" else t
            assert raw.numpy().tobytes() == expected, name + " via torch"
            if split:  # a box across the rank boundary
                row = len(expected) // shape[0]
                box = r.read(name, (1,) + (0,) * (len(shape) - 1), (shape[0] - 2,) + shape[1:])
                assert box.tobytes() == expected[row:row * (shape[0] - 1)], name + " box"
        for rank in range(r.world_size):
            rng, position, user = r.rank_state(rank)
            assert position == {"epoch": 1, "index": rank}, position
            if writer == "cxx":
                assert rng == rng_bytes(rank), rng
                assert user == {"rank": rank}, user
            else:
                assert user["extra"] == {"rank": rank}, user
        g = r.global_state()
        assert g == {"step": STEP, "lr_schedule": {"lr": 0.25}, "user": {"writer": writer}}, g


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "write":
        write(sys.argv[2])
    else:
        sys.exit("usage: xlang_py.py write DIR")
