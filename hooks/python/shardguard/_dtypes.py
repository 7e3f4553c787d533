"""numpy / torch arrays <-> (safetensors dtype name, shape, raw little-endian bytes).

torch is never imported here: a value is a torch tensor only if torch is already loaded.
bfloat16 crosses as raw 16-bit words (numpy has no bfloat16). Pure functions.
"""

import sys

import numpy as np

_NUMPY_TO_ST = {
    np.dtype(np.bool_): "BOOL", np.dtype(np.uint8): "U8", np.dtype(np.int8): "I8",
    np.dtype(np.int16): "I16", np.dtype(np.uint16): "U16", np.dtype(np.float16): "F16",
    np.dtype(np.int32): "I32", np.dtype(np.uint32): "U32", np.dtype(np.float32): "F32",
    np.dtype(np.float64): "F64", np.dtype(np.int64): "I64", np.dtype(np.uint64): "U64",
    np.dtype(np.complex64): "C64",
}
_ST_TO_NUMPY = {v: k for k, v in _NUMPY_TO_ST.items()}
# Types numpy cannot hold are read as raw words of the same width.
_ST_RAW = {"BF16": np.dtype(np.uint16), "F8_E5M2": np.dtype(np.uint8),
           "F8_E4M3": np.dtype(np.uint8), "F8_E8M0": np.dtype(np.uint8),
           "F8_E4M3FNUZ": np.dtype(np.uint8), "F8_E5M2FNUZ": np.dtype(np.uint8)}


def _torch():
    return sys.modules.get("torch")


def is_torch(value):
    torch = _torch()
    return torch is not None and isinstance(value, torch.Tensor)


_TORCH_NAMES = {"bool": "BOOL", "uint8": "U8", "int8": "I8", "int16": "I16",
                "float16": "F16", "bfloat16": "BF16", "int32": "I32", "float32": "F32",
                "float64": "F64", "int64": "I64", "complex64": "C64"}


def torch_st_dtype(dtype):
    """The safetensors name of a torch dtype; TypeError saying what is supported."""
    name = str(dtype).replace("torch.", "")
    if name not in _TORCH_NAMES:
        raise TypeError("shardguard: torch dtype %s is not supported (supported: %s)"
                        % (name, ", ".join(sorted(_TORCH_NAMES))))
    return _TORCH_NAMES[name]


def _torch_to_st(torch, dtype):
    return torch_st_dtype(dtype)


def numpy_st_dtype(value):
    """(safetensors name, shape, itemsize) of a numpy array or scalar, without copying."""
    a = np.asarray(value)
    dt = a.dtype.newbyteorder("=") if a.dtype.byteorder == ">" else a.dtype
    name = _NUMPY_TO_ST.get(dt)
    if name is None:
        raise TypeError("shardguard: numpy dtype %s is not supported (supported: %s)"
                        % (a.dtype, ", ".join(sorted(str(d) for d in _NUMPY_TO_ST))))
    return name, tuple(a.shape), a.dtype.itemsize


def to_bytes(value):
    """Returns (dtype name, shape tuple, C-contiguous little-endian numpy array) for a numpy
    array or torch tensor; the array is a view where possible, so keep it alive while the
    library reads it."""
    if is_torch(value):
        torch = _torch()
        t = value.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        t = t.contiguous()
        name = _torch_to_st(torch, t.dtype)
        raw = t.view(torch.int16).numpy() if t.dtype == torch.bfloat16 else t.numpy()
        return name, tuple(t.shape), _c_order(raw)
    name, _, _ = numpy_st_dtype(value)
    a = np.asarray(value)
    if a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("<"))
    return name, tuple(a.shape), _c_order(a)


def _c_order(a):
    # Not np.ascontiguousarray: it turns a 0-d array into a 1-d one.
    return a if a.flags.c_contiguous else a.copy(order="C")


def numpy_dtype(st_name):
    """The numpy dtype that holds a safetensors dtype (raw words for BF16 and F8)."""
    if st_name in _ST_TO_NUMPY:
        return _ST_TO_NUMPY[st_name]
    if st_name in _ST_RAW:
        return _ST_RAW[st_name]
    raise TypeError("shardguard: dtype %s cannot be read into an array" % st_name)


def as_torch(array, st_name):
    """A torch tensor sharing `array`'s memory (BF16 reinterpreted), or `array` itself for
    dtypes this torch lacks (unsigned 16/32/64-bit, F8)."""
    torch = _torch()
    if torch is None:
        raise RuntimeError("shardguard: torch is not imported")
    if st_name == "BF16":
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    if st_name in ("U16", "U32", "U64") or st_name in _ST_RAW:
        return array
    return torch.from_numpy(array)
