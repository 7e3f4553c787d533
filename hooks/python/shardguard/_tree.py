"""State trees: what save() takes (a PyTorch user's nested state) <-> JSON plus tensor leaves.

A state is nested dicts (str or int keys; OrderedDict kept, with a state_dict's `_metadata`),
lists and tuples of tensors (torch, numpy, numpy scalars, Chunk, torch's ShardedTensor),
numbers, strings, booleans and None. flatten() turns it into a JSON tree (stored in the
manifest's format-2 "tree" fields) and a list of tensor leaves (stored in the shards);
unflatten() builds the same structure back. Encoding (every JSON object is a tag, so user
strings and keys never need escaping):

    null, true, false, "text", 12      None, bool, str, an int that fits in 64 bits
    {"$int": "123456789012345678901"}  a larger int
    {"$float": "0.1"}                  a float, as repr() (exact; "inf", "-inf", "nan" too):
                                       numbers never pass through a JSON parser's rounding
    [...]                              list
    {"$tuple": [...]}                  tuple (and tuple subclasses, e.g. torch.Size)
    {"$dict": [[key, value], ...]}     dict, in order; "ordered": true for an OrderedDict,
                                       "metadata": tree for a state_dict's `_metadata`
    {"$tensor": NAME, "lib": "torch" | "numpy", "dtype": "float32", "layout": LAYOUT}
                                       a tensor stored under NAME in the checkpoint;
                                       LAYOUT is "replicated" (every rank holds it; written
                                       once, split across ranks), "sharded" (each rank
                                       saved its own chunk) or "rank" (one rank's own)
    {"$dropped": "callable"}           a callable in a list or tuple (in a dict, the key is
                                       left out, so load_state_dict keeps the bound one)

Tensor names are the key path joined with "." (model.fc1.weight, optim.state.0.exp_avg), so
that an export of `model.*` is what from_pretrained loads. Errors (ValueError, TypeError)
name the key path, e.g. state['optim']['param_groups'][0]['fn'], and say what is supported.
Pure functions; torch is never imported here (a value is a torch tensor only if torch is
already loaded).
"""

import collections
import functools
import sys
import types
import weakref

import numpy as np

INT64_MIN, UINT64_MAX = -(1 << 63), (1 << 64) - 1

SUPPORTED = ("dicts (str or int keys), lists and tuples of tensors (torch, numpy), "
             "shardguard.Chunk, ShardedTensor, numbers, strings, booleans and None; "
             "functions and methods are dropped")

# Callables a state_dict may hold that its load_state_dict rebinds (OneCycleLR's
# anneal_func, CyclicLR's scale_fn): dropped. Other callable objects (a Module) are errors.
_DROPPED = (types.FunctionType, types.MethodType, types.BuiltinFunctionType,
            types.BuiltinMethodType, functools.partial, weakref.ref)

# A tensor leaf found by flatten(): where it is, its name, the value, and its layout.
Leaf = collections.namedtuple("Leaf", ["path", "name", "value", "layout"])


def _torch():
    return sys.modules.get("torch")


def is_torch_tensor(value):
    torch = _torch()
    return torch is not None and isinstance(value, torch.Tensor)


def is_sharded_tensor(value):
    """torch.distributed._shard's ShardedTensor (checked by name: importing that module fails
    on some torch builds)."""
    cls = type(value)
    return cls.__name__ == "ShardedTensor" and cls.__module__.startswith(
        "torch.distributed._shard.sharded_tensor")


def is_chunk(value):
    from .checkpointer import Chunk
    return isinstance(value, Chunk)


def describe(path):
    """state['a'][0]['b'] for the path ('a', 0, 'b')."""
    return "state" + "".join("[%r]" % (k,) for k in path)


def tensor_name(prefix, path):
    return prefix + ".".join(str(k) for k in path)


class _Flattener:
    def __init__(self, prefix, root_name, layout_of_plain):
        self.prefix = prefix
        self.root = root_name
        self.plain_layout = layout_of_plain
        self.leaves = []
        self.names = {}  # tensor name -> path that took it

    def where(self, path):
        return self.root + "".join("[%r]" % (k,) for k in path)

    def tensor(self, path, value, layout):
        name = tensor_name(self.prefix, path)
        if not path:
            raise TypeError("shardguard: %s is a tensor: save a dict of tensors" % self.root)
        if name in self.names:
            raise ValueError("shardguard: %s and %s are both stored as tensor '%s'; rename one "
                             "of the keys" % (self.where(self.names[name]), self.where(path),
                                                 name))
        self.names[name] = path
        self.leaves.append(Leaf(path, name, value, layout))
        lib, dtype = _lib_and_dtype(value)
        return {"$tensor": name, "lib": lib, "dtype": dtype, "layout": layout}

    def value(self, path, v):
        if v is None or isinstance(v, (bool, str)):
            return v
        if is_chunk(v):
            return self.tensor(path, v, "sharded")
        if is_sharded_tensor(v):
            return self.tensor(path, v, "sharded")
        if is_torch_tensor(v) or isinstance(v, (np.ndarray, np.generic)):
            return self.tensor(path, v, self.plain_layout)
        if isinstance(v, int):
            v = int(v)
            return v if INT64_MIN <= v <= UINT64_MAX else {"$int": str(v)}
        if isinstance(v, float):
            return {"$float": repr(float(v))}
        if isinstance(v, dict):
            return self.mapping(path, v)
        if isinstance(v, tuple):
            return {"$tuple": self.sequence(path, v)}
        if isinstance(v, list):
            return self.sequence(path, v)
        if isinstance(v, _DROPPED):
            return {"$dropped": "callable"}
        raise TypeError("shardguard: %s is a %s, which cannot be saved; save() supports %s"
                        % (self.where(path), type(v).__module__ + "." + type(v).__qualname__,
                           SUPPORTED))

    def sequence(self, path, items):
        return [self.value(path + (i,), x) for i, x in enumerate(items)]

    def mapping(self, path, d):
        items = []
        seen = {}
        for k, v in d.items():
            if isinstance(k, bool) or not isinstance(k, (str, int)):
                raise TypeError("shardguard: %s has a key %r of type %s; keys must be str or "
                                "int" % (self.where(path), k, type(k).__name__))
            if str(k) in seen:
                raise ValueError("shardguard: %s has the keys %r and %r, which name the same "
                                 "tensors; rename one" % (self.where(path), seen[str(k)], k))
            seen[str(k)] = k
            if isinstance(v, _DROPPED):
                continue  # a bound method or lambda: the object's load_state_dict keeps its own
            items.append([int(k) if isinstance(k, int) else k, self.value(path + (k,), v)])
        out = {"$dict": items}
        if isinstance(d, collections.OrderedDict):
            out["ordered"] = True
        meta = getattr(d, "_metadata", None)
        if meta is not None:
            out["metadata"] = self.value(path + ("_metadata",), meta)
        return out


def _lib_and_dtype(value):
    if is_chunk(value):
        value = value.value
    if is_sharded_tensor(value):
        return "torch", str(value.dtype).replace("torch.", "")
    if is_torch_tensor(value):
        return "torch", str(value.dtype).replace("torch.", "")
    return "numpy", np.asarray(value).dtype.newbyteorder("=").name


def flatten(state, prefix="", root_name="state", plain_layout="replicated"):
    """(JSON tree, [Leaf]) of `state`. Plain tensors get `plain_layout`; Chunks and
    ShardedTensors are "sharded". Tensor names are `prefix` + the dotted key path."""
    f = _Flattener(prefix, root_name, plain_layout)
    if not isinstance(state, dict):
        raise TypeError("shardguard: %s is a %s; save a dict (e.g. {'model': "
                        "model.state_dict(), 'optim': opt.state_dict(), 'step': step})"
                        % (root_name, type(state).__name__))
    tree = f.mapping((), state)
    return tree, f.leaves


def tensor_refs(tree):
    """Every {"$tensor": ...} of a JSON tree, in order."""
    out = []

    def walk(node):
        if isinstance(node, list):
            for x in node:
                walk(x)
        elif isinstance(node, dict):
            if "$tensor" in node:
                out.append(node)
            elif "$dict" in node:
                for _, v in node["$dict"]:
                    walk(v)
                if "metadata" in node:
                    walk(node["metadata"])
            elif "$tuple" in node:
                walk(node["$tuple"])
    walk(tree)
    return out


def unflatten(tree, fetch):
    """The state that `tree` describes; fetch(ref, path) returns the value of a tensor
    reference (ref is the {"$tensor": ...} object)."""
    def build(node, path):
        if node is None or isinstance(node, (bool, int, str)):
            return node
        if isinstance(node, float):  # written by another client: accepted as is
            return node
        if isinstance(node, list):
            return [build(x, path + (i,)) for i, x in enumerate(node)]
        if not isinstance(node, dict):
            raise ValueError("shardguard: %s: unexpected %r in the saved tree"
                             % (describe(path), node))
        if "$float" in node:
            return float(node["$float"])
        if "$int" in node:
            return int(node["$int"])
        if "$tuple" in node:
            return tuple(build(x, path + (i,)) for i, x in enumerate(node["$tuple"]))
        if "$tensor" in node:
            return fetch(node, path)
        if "$dropped" in node:
            return None
        if "$dict" in node:
            cls = collections.OrderedDict if node.get("ordered") else dict
            out = cls((k, build(v, path + (k,))) for k, v in node["$dict"])
            if "metadata" in node:
                meta = build(node["metadata"], path + ("_metadata",))
                try:
                    out._metadata = meta
                except AttributeError:  # a plain dict holds no attributes
                    out = collections.OrderedDict(out)
                    out._metadata = meta
            return out
        raise ValueError("shardguard: %s: unknown tag in the saved tree: %s"
                         % (describe(path), sorted(node)))
    return build(tree, ())
