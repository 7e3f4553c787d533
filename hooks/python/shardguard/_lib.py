"""ctypes binding of libshardguard.so (hooks/include/shardguard.h).

The library is found, in order, at $SHARDGUARD_LIB (the .so file or its directory), at the
path written into _install_paths.py when the package was installed (`cmake --install`, the
Debian package, or pip from an installed prefix), next to this package, then in the build
directories of a source checkout (the newest one wins).
Every fallible call is wrapped by check(), which raises ShardguardError with the library's
message. Thread-safety: as the C ABI (one thread per client; readers from any thread).
"""

import ctypes
import glob
import os

API_VERSION = 1
_LIB_NAME = "libshardguard.so"

# sg_status values, in the order of shardguard.h.
STATUS_NAMES = (
    "OK", "IO", "NO_SPACE", "NOT_FOUND", "INVALID", "CORRUPT", "TIMEOUT", "CANCELLED",
    "FENCED", "UNSUPPORTED", "INTERNAL",
)
OK = 0
NOT_FOUND = 3
CANCELLED = 7


class ShardguardError(RuntimeError):
    """A failed libshardguard call: `status` is the sg_status name ("NOT_FOUND", ...)."""

    def __init__(self, code, message):
        self.code = code
        self.status = STATUS_NAMES[code] if 0 <= code < len(STATUS_NAMES) else str(code)
        super().__init__("%s (%s)" % (message, self.status))


class LibraryNotFound(ImportError):
    pass


def _candidates():
    env = os.environ.get("SHARDGUARD_LIB")
    if env:
        yield os.path.join(env, _LIB_NAME) if os.path.isdir(env) else env
        return  # an explicit choice is never second-guessed
    try:
        from . import _install_paths  # written at install time; absent in a source tree
        yield _install_paths.LIBRARY
    except ImportError:
        pass
    here = os.path.dirname(os.path.abspath(__file__))
    yield os.path.join(here, _LIB_NAME)
    root = os.path.normpath(os.path.join(here, "..", "..", ".."))
    builds = glob.glob(os.path.join(root, "build*", "hooks", _LIB_NAME))
    for path in sorted(builds, key=os.path.getmtime, reverse=True):
        yield path


def _load():
    tried = []
    for path in _candidates():
        tried.append(path)
        if os.path.exists(path):
            return ctypes.CDLL(path)
    raise LibraryNotFound(
        "shardguard: %s not found (looked at: %s). Build it (cmake --build BUILD --target "
        "shardguard_c) and set SHARDGUARD_LIB to its path." % (_LIB_NAME, ", ".join(tried) or "-"))


_c = ctypes
_u64, _u32, _i64, _int, _size = _c.c_uint64, _c.c_uint32, _c.c_int64, _c.c_int, _c.c_size_t
_vp, _cp = _c.c_void_p, _c.c_char_p
_pu64 = _c.POINTER(_u64)


class ReadSpec(_c.Structure):
    """sg_read_spec: one box of one tensor for sg_reader_read_many."""
    _fields_ = [("name", _cp), ("ndim", _c.c_size_t), ("offsets", _pu64), ("sizes", _pu64),
                ("out", _vp), ("out_size", _c.c_size_t)]


# name: (restype, argtypes). Handles are opaque void pointers.
_PROTOTYPES = {
    "sg_api_version": (_int, []),
    "sg_last_error": (_cp, []),
    "sg_client_from_env": (_int, [_cp, _u64, _int, _c.POINTER(_vp)]),
    "sg_client_free": (None, [_vp]),
    "sg_client_rank": (_u32, [_vp]),
    "sg_client_world_size": (_u32, [_vp]),
    "sg_client_local_rank": (_u32, [_vp]),
    "sg_client_attempt": (_u64, [_vp]),
    "sg_client_job_id": (_cp, [_vp]),
    "sg_client_checkpoint_dir": (_cp, [_vp]),
    "sg_client_under_shardguard": (_int, [_vp]),
    "sg_client_heartbeat": (None, [_vp, _u64]),
    "sg_client_report_scalar": (_int, [_vp, _c.c_char_p, _u64, _c.c_double]),
    "sg_client_should_checkpoint": (_int, [_vp, _u64]),
    "sg_client_should_exit": (_int, [_vp]),
    "sg_client_emergency": (_int, [_vp, _c.POINTER(_i64), _pu64, _c.c_char_p, _size]),
    "sg_client_last_committed_step": (_u64, [_vp]),
    "sg_client_notify_signal": (_int, [_vp]),
    "sg_client_restore_signal": (_int, [_vp]),
    "sg_client_commit_timeout_ms": (_u64, [_vp]),
    "sg_client_resume_manifest": (_cp, [_vp]),
    "sg_client_report_resume_failure": (_int, [_vp, _vp, _cp]),
    "sg_client_notify_sigterm": (_int, [_vp]),
    "sg_client_open_resume": (_int, [_vp, _c.POINTER(_vp)]),
    "sg_reader_open": (_int, [_cp, _c.POINTER(_vp)]),
    "sg_reader_free": (None, [_vp]),
    "sg_reader_step": (_u64, [_vp]),
    "sg_reader_world_size": (_u32, [_vp]),
    "sg_reader_job_id": (_cp, [_vp]),
    "sg_reader_tensor_count": (_size, [_vp]),
    "sg_reader_tensor_name": (_cp, [_vp, _size]),
    "sg_reader_tensor_info": (_int, [_vp, _cp, _c.POINTER(_cp), _c.POINTER(_size),
                                     _c.POINTER(_pu64)]),
    "sg_reader_read": (_int, [_vp, _cp, _size, _pu64, _pu64, _vp, _size]),
    "sg_reader_read_many": (_int, [_vp, _c.POINTER(ReadSpec), _size]),
    "sg_reader_rank_rng": (_int, [_vp, _u32, _c.POINTER(_vp), _c.POINTER(_size)]),
    "sg_reader_rank_data_position": (_cp, [_vp, _u32]),
    "sg_reader_rank_user": (_cp, [_vp, _u32]),
    "sg_reader_global_step": (_u64, [_vp]),
    "sg_reader_global_lr_schedule": (_cp, [_vp]),
    "sg_reader_global_user": (_cp, [_vp]),
    "sg_reader_global_tree": (_cp, [_vp]),
    "sg_reader_rank_tree": (_cp, [_vp, _u32]),
    "sg_reader_checksum_failure": (_int, [_vp, _c.POINTER(_cp), _pu64, _c.POINTER(_int)]),
    "sg_client_begin_save": (_int, [_vp, _u64, _c.POINTER(_vp)]),
    "sg_writer_add_tensor": (_int, [_vp, _cp, _cp, _size, _pu64, _vp, _size]),
    "sg_writer_add_chunk": (_int, [_vp, _cp, _cp, _size, _pu64, _pu64, _pu64, _vp, _size]),
    "sg_writer_set_rank_state": (_int, [_vp, _vp, _size, _cp, _cp]),
    "sg_writer_set_global_state": (_int, [_vp, _u64, _cp, _cp]),
    "sg_writer_set_rank_tree": (_int, [_vp, _cp]),
    "sg_writer_set_global_tree": (_int, [_vp, _cp]),
    "sg_writer_free": (None, [_vp]),
    "sg_client_save": (_int, [_vp, _vp, _cp]),
    "sg_client_wait": (_int, [_vp]),
    "sg_client_reserve": (_int, [_vp, _u64]),
}


def _bind():
    lib = _load()
    missing = [name for name in _PROTOTYPES if not hasattr(lib, name)]
    if missing:
        raise LibraryNotFound("shardguard: %s is older than this package: it lacks %s. Use the "
                              "libshardguard.so built from the same sources"
                              % (lib._name, ", ".join(missing)))
    for name, (restype, argtypes) in _PROTOTYPES.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    version = lib.sg_api_version()
    if version != API_VERSION:
        raise LibraryNotFound("shardguard: %s has API version %d, this package needs %d"
                              % (lib._name, version, API_VERSION))
    return lib


lib = _bind()


def check(status):
    """Raises ShardguardError for a failed call's status."""
    if status != OK:
        raise ShardguardError(status, lib.sg_last_error().decode("utf-8", "replace"))


def text(value):
    """bytes from the library -> str."""
    return value.decode("utf-8") if value is not None else None


def u64_array(values):
    values = [int(v) for v in values]
    return (_u64 * max(len(values), 1))(*values), len(values)
