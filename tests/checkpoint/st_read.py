#!/usr/bin/env python3
"""A small independent safetensors reader used by safetensors_test to cross-check our writer.

Parses a file per the published format (8-byte little-endian N, JSON header, data) with
pure Python, interprets each tensor with numpy (or with torch when --torch is given), and
prints one line per tensor:  name dtype [shape] nbytes crc32 sum
where `sum` is the sum of the elements as an integer ("re:im" for C64), or "-" when the
library has no such dtype. Metadata lines follow as:  meta key value
Exit status 3 means the library is not installed (the caller skips).
"""
import json
import struct
import sys
import zlib

NUMPY_DTYPES = {
    "BOOL": "bool", "U8": "uint8", "I8": "int8", "U16": "<u2", "I16": "<i2", "F16": "<f2",
    "U32": "<u4", "I32": "<i4", "F32": "<f4", "U64": "<u8", "I64": "<i8", "F64": "<f8",
    "C64": "<c8",
}
TORCH_DTYPES = {  # what torch 1.13 has; newer dtypes fall back to "-"
    "BOOL": "bool", "U8": "uint8", "I8": "int8", "I16": "int16", "F16": "float16",
    "BF16": "bfloat16", "I32": "int32", "F32": "float32", "I64": "int64", "F64": "float64",
    "C64": "complex64",
}


def read_header(data):
    if len(data) < 8:
        raise ValueError("too small")
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        raise ValueError("header length past end")
    header = json.loads(data[8:8 + n].decode("utf-8"))
    metadata = header.pop("__metadata__", None) or {}
    tensors = sorted(header.items(), key=lambda kv: tuple(kv[1]["data_offsets"]))
    start = 0
    for _, info in tensors:
        begin, end = info["data_offsets"]
        if begin != start or end < begin:
            raise ValueError("offsets not contiguous")
        start = end
    if 8 + n + start != len(data):
        raise ValueError("data size mismatch")
    return 8 + n, tensors, metadata


def format_sum(total):
    if isinstance(total, complex):
        return "%d:%d" % (round(total.real), round(total.imag))
    return "%d" % round(total)


def numpy_sum(np, dtype, raw, shape):
    if dtype == "BF16":  # numpy has no bfloat16: widen the 16 bits to a float32
        wide = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
        return format_sum(float(wide.view(np.float32).reshape(shape).astype(np.float64).sum()))
    if dtype not in NUMPY_DTYPES:
        return "-"
    array = np.frombuffer(raw, dtype=NUMPY_DTYPES[dtype]).reshape(shape)
    if dtype == "C64":
        return format_sum(complex(array.astype(np.complex128).sum()))
    return format_sum(float(array.astype(np.float64).sum()))


def torch_sum(torch, dtype, raw, shape):
    if dtype not in TORCH_DTYPES:
        return "-"
    tdtype = getattr(torch, TORCH_DTYPES[dtype])
    if len(raw) == 0:
        tensor = torch.empty(shape, dtype=tdtype)
    else:
        tensor = torch.frombuffer(bytearray(raw), dtype=tdtype).reshape(shape)
    if dtype == "C64":
        return format_sum(complex(tensor.to(torch.complex128).sum().item()))
    return format_sum(float(tensor.to(torch.float64).sum().item()))


def main():
    use_torch = "--torch" in sys.argv[1:]
    path = [a for a in sys.argv[1:] if a != "--torch"][0]
    try:
        if use_torch:
            import torch as lib
        else:
            import numpy as lib
    except ImportError as e:
        print("missing:", e)
        return 3
    with open(path, "rb") as f:
        data = f.read()
    data_start, tensors, metadata = read_header(data)
    for name, info in tensors:
        begin, end = info["data_offsets"]
        raw = data[data_start + begin:data_start + end]
        shape = list(info["shape"])
        dtype = info["dtype"]
        total = torch_sum(lib, dtype, raw, shape) if use_torch else numpy_sum(lib, dtype, raw, shape)
        print(name, dtype, "[" + ",".join(map(str, shape)) + "]", len(raw), zlib.crc32(raw), total)
    for key in sorted(metadata):
        print("meta", key, metadata[key])
    return 0


if __name__ == "__main__":
    sys.exit(main())
