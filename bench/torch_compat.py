"""Makes Debian 12's torch 1.13 import its distributed checkpoint (DCP) on Python 3.11.

torch/distributed/_shard/sharded_tensor/metadata.py declares a dataclass field with a
mutable default, `field(default=TensorProperties())`, which Python 3.11's dataclasses refuse
("mutable default ... use default_factory"), so `torch.distributed._shard.checkpoint` fails
to import. install() puts an import hook in front that compiles that one module from its
source with the line rewritten to `field(default_factory=TensorProperties)`, in memory only:
nothing on disk changes, and a torch without the bad line is left alone.

For benchmarks and tests only, never for the shipped package. This is the bench's local
copy of the fix the PyTorch work puts in a shared test helper (tests/support/); when that
lands, the bench should import it from there instead.
"""
import importlib.abc
import importlib.machinery
import sys

_TARGET = "torch.distributed._shard.sharded_tensor.metadata"
_BAD = b"field(default=TensorProperties())"
_GOOD = b"field(default_factory=TensorProperties)"


class _PatchedLoader(importlib.machinery.SourceFileLoader):
    def get_code(self, fullname):
        source = self.get_data(self.path)
        # Compiled from the rewritten source, never from a cached .pyc of the original.
        return compile(source.replace(_BAD, _GOOD), self.path, "exec", dont_inherit=True)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname != _TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or not spec.origin or not spec.origin.endswith(".py"):
            return None
        with open(spec.origin, "rb") as f:
            if _BAD not in f.read():
                return None  # a torch that does not need the fix
        spec.loader = _PatchedLoader(fullname, spec.origin)
        return spec


def install():
    """Idempotent; call before importing torch.distributed checkpoint modules."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


def import_dcp():
    """The DCP module (torch.distributed.checkpoint, or 1.13's _shard.checkpoint) with the
    fix installed; raises ImportError with the reason when there is none."""
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
