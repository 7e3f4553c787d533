"""Test and benchmark helper: import Debian 12's torch 1.13 with its distributed sharding modules.

Debian's python3-torch (1.13) cannot import `torch.distributed._shard` (and so neither
`torch.distributed._shard.checkpoint`, PyTorch's DCP of that release) on Python 3.11: one
dataclass field in torch/distributed/_shard/sharded_tensor/metadata.py has a mutable default,

    tensor_properties: TensorProperties = field(default=TensorProperties())

which Python 3.11's dataclasses refuse ("mutable default ... use default_factory"). This module
installs an import hook that compiles that one file from its source with the line rewritten to
`field(default_factory=TensorProperties)`, in memory; nothing on disk changes. Newer torch
releases carry the same fix upstream; there the hook finds no such line and changes nothing.

Used by tests/ and bench/ only, never by the shipped shardguard package: a user's own torch is
theirs to fix. Usage, before anything imports torch.distributed._shard:

    sys.path.insert(0, "<repo>/tests/support")
    import torch_compat
    torch_compat.install()           # idempotent; returns the list of lines it rewrote so far
    shard = torch_compat.import_shard()   # or: import torch.distributed._shard

Thread-safety: install() is meant for start-up, before other threads import torch.
"""

import importlib.abc
import importlib.machinery
import importlib.util
import sys

_TARGET = "torch.distributed._shard.sharded_tensor.metadata"
_BAD = "field(default=TensorProperties())"
_GOOD = "field(default_factory=TensorProperties)"

# What the hook rewrote, for a test or a bench to report ("file: old -> new").
rewritten = []


class _PatchingLoader(importlib.machinery.SourceFileLoader):
    """Loads metadata.py from its source with the mutable default replaced."""

    def get_code(self, fullname):
        path = self.get_filename(fullname)
        source = self.get_data(path).decode("utf-8")
        if _BAD in source:
            source = source.replace(_BAD, _GOOD)
            rewritten.append(f"{path}: {_BAD} -> {_GOOD}")
        # Compiled from the rewritten text; no .pyc is written for it.
        return compile(source, path, "exec", dont_inherit=True)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname != _TARGET:
            return None
        # Ask the rest of sys.meta_path where the real file is, then load it our way.
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if not spec.origin or not spec.origin.endswith(".py"):
            return spec  # not a plain source file: leave it alone
        loader = _PatchingLoader(fullname, spec.origin)
        return importlib.util.spec_from_file_location(fullname, spec.origin, loader=loader)


_finder = _Finder()


def install():
    """Puts the import hook first on sys.meta_path (once). Fails if the module is already
    loaded unpatched, since a hook cannot fix an import that already ran."""
    if _finder not in sys.meta_path:
        if _TARGET in sys.modules and not rewritten:
            raise RuntimeError(f"torch_compat.install() called after {_TARGET} was imported")
        sys.meta_path.insert(0, _finder)
    return list(rewritten)


def import_shard():
    """install(), then imports and returns torch.distributed._shard."""
    install()
    import torch.distributed._shard as shard  # noqa: E402 (after the hook on purpose)

    return shard


def import_shard_checkpoint():
    """install(), then imports and returns torch.distributed._shard.checkpoint (DCP of 1.13)."""
    install()
    import torch.distributed._shard.checkpoint as dcp  # noqa: E402

    return dcp


def import_dcp():
    """The DCP module of this torch (torch.distributed.checkpoint, or 1.13's
    _shard.checkpoint), with the fix installed; ImportError naming every reason otherwise."""
    import importlib

    install()
    errors = []
    for name in ("torch.distributed.checkpoint", "torch.distributed._shard.checkpoint"):
        try:
            module = importlib.import_module(name)
            if hasattr(module, "save_state_dict"):
                return module
            errors.append(f"{name}: no save_state_dict")
        except Exception as e:  # noqa: BLE001 - every failure is reported
            errors.append(f"{name}: {type(e).__name__}: {e}")
    raise ImportError("; ".join(errors))
