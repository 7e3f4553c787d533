"""Checkpointer: the Python trainer's side of shardguard, over libshardguard.so.

    ckpt = Checkpointer("checkpoints", every_steps=100)
    resumed = ckpt.load()                       # None on a fresh start
    start, state, extra = resumed if resumed else (0, init_state(), {})
    for step in range(start + 1, steps + 1):
        train(step); ckpt.heartbeat(step)
        if ckpt.should_checkpoint(step):
            ckpt.save(step, state, extra_state={"best": best})
        if ckpt.should_exit():                  # after an emergency save
            sys.exit(EXIT_AFTER_EMERGENCY)

Tensors are numpy arrays or CPU torch tensors, saved whole or as a chunk of a bigger one
(Chunk(value, global_shape, offsets), or save(..., chunks={name: (global_shape, offsets)})).
RNG states (random, numpy, torch CPU) and the data loader position are saved per rank and
restored by load(); `extra_state` is any JSON value. Thread-safety: use a Checkpointer from
one thread (the training loop).
"""

import collections
import ctypes
import json
import signal
import weakref

from . import _dtypes, _rng
from ._lib import NOT_FOUND, ShardguardError, check, lib, text, u64_array
from .reader import Reader

# What a job exits with after an emergency checkpoint (EX_TEMPFAIL: requeue me).
EXIT_AFTER_EMERGENCY = 75

# A piece of a tensor split across ranks: `value` holds the box at `offsets`.
Chunk = collections.namedtuple("Chunk", ["value", "global_shape", "offsets"])

_MARK = "__shardguard_py__"
_live = weakref.WeakSet()  # every open Checkpointer, for the guard


def live_checkpointers():
    return list(_live)


class Checkpointer:
    """One rank's checkpoints. checkpoint_dir, every_steps and async_save are defaults that
    SHARDGUARD_* variables override; data_loader (optional) has state_dict() and
    load_state_dict(); capture_rng saves and restores the RNG states."""

    def __init__(self, checkpoint_dir=None, every_steps=0, async_save=False, data_loader=None,
                 capture_rng=True):
        out = ctypes.c_void_p()
        check(lib.sg_client_from_env(None if checkpoint_dir is None else str(checkpoint_dir)
                                     .encode(), int(every_steps), 1 if async_save else 0,
                                     ctypes.byref(out)))
        self._h = out
        self.data_loader = data_loader
        self.capture_rng = capture_rng
        # Filled by load(): the job state saved beside the tensors.
        self.data_position = None
        self.lr_schedule = None
        self.global_state = None
        # A caught signal the client could not take (it handles no signal): saved and
        # exited after here instead.
        self._fallback_step = None
        self._fallback_exit = False
        _live.add(self)
        from . import guard
        guard.reinstall_active()  # creating the client replaced the guard's handler

    # ---- identity ----
    @property
    def rank(self):
        return lib.sg_client_rank(self._h)

    @property
    def world_size(self):
        return lib.sg_client_world_size(self._h)

    @property
    def local_rank(self):
        return lib.sg_client_local_rank(self._h)

    @property
    def attempt(self):
        return lib.sg_client_attempt(self._h)

    @property
    def job_id(self):
        return text(lib.sg_client_job_id(self._h))

    @property
    def checkpoint_dir(self):
        return text(lib.sg_client_checkpoint_dir(self._h))

    @property
    def under_shardguard(self):
        return bool(lib.sg_client_under_shardguard(self._h))

    # ---- the loop ----
    def heartbeat(self, step):
        lib.sg_client_heartbeat(self._h, int(step))

    def should_checkpoint(self, step):
        """True when `step` must be saved: the schedule, the agent, or a signal (caught by
        the client or by a PreemptionGuard)."""
        from . import guard
        pending = guard.take_pending()
        if signal.SIGTERM in pending and lib.sg_client_notify_sigterm(self._h) == 0:
            pending.discard(signal.SIGTERM)  # the client tells the supervisor
        if pending and lib.sg_client_notify_signal(self._h) != 0:
            if self._fallback_step is None:
                self._fallback_step = int(step)
        if self._fallback_step is not None and not self._fallback_exit:
            return True
        return bool(lib.sg_client_should_checkpoint(self._h, int(step)))

    def should_exit(self):
        """True once an emergency checkpoint is committed or the agent said stop."""
        return self._fallback_exit or bool(lib.sg_client_should_exit(self._h))

    def emergency(self):
        """{"deadline_unix_ms", "at_step", "reason"} of a pending emergency, or None."""
        deadline, at_step = ctypes.c_int64(), ctypes.c_uint64()
        reason = ctypes.create_string_buffer(128)
        if not lib.sg_client_emergency(self._h, ctypes.byref(deadline), ctypes.byref(at_step),
                                       reason, len(reason)):
            return None
        return {"deadline_unix_ms": deadline.value, "at_step": at_step.value,
                "reason": reason.value.decode()}

    @property
    def last_committed_step(self):
        return lib.sg_client_last_committed_step(self._h)

    # ---- save ----
    def save(self, step, state_dict, extra_state=None, data_position=None, lr_schedule=None,
             global_state=None, chunks=None, reason=None):
        """Saves this rank's `state_dict` (name -> array/tensor/Chunk) at `step` with the RNG
        states, data loader position and `extra_state`; rank 0 also saves lr_schedule and
        global_state and commits. `reason`: None, "periodic", "final", "manual", "emergency".
        Returns when written (sync) or snapshotted (async); raises ShardguardError."""
        writer = ctypes.c_void_p()
        check(lib.sg_client_begin_save(self._h, int(step), ctypes.byref(writer)))
        keep = []  # arrays the library reads until sg_client_save returns
        try:
            torch_names = []
            for name, value in state_dict.items():
                if chunks and name in chunks:
                    value = Chunk(value, *chunks[name])
                self._add(writer, name, value, keep, torch_names)
            if data_position is None and self.data_loader is not None:
                data_position = self.data_loader.state_dict()
            user = {_MARK: 1, "extra": extra_state, "torch": sorted(torch_names)}
            rng = _rng.capture() if self.capture_rng else b""
            check(lib.sg_writer_set_rank_state(writer, rng, len(rng), _json(data_position),
                                               _json(user)))
            if self.rank == 0:
                check(lib.sg_writer_set_global_state(writer, int(step), _json(lr_schedule),
                                                     _json(global_state)))
        except BaseException:
            lib.sg_writer_free(writer)
            raise
        emergency = self._fallback_step is not None and reason is None
        check(lib.sg_client_save(self._h, writer, b"emergency" if emergency
                                 else reason.encode() if reason else None))
        del keep
        if emergency:
            self._fallback_exit = True

    def _add(self, writer, name, value, keep, torch_names):
        chunk = value if isinstance(value, Chunk) else None
        if chunk is not None:
            value = chunk.value
        if _dtypes.is_torch(value):
            torch_names.append(name)
        dtype, shape, array = _dtypes.to_bytes(value)
        keep.append(array)
        data = array.ctypes.data_as(ctypes.c_void_p)
        if chunk is None:
            dims, n = u64_array(shape)
            check(lib.sg_writer_add_tensor(writer, name.encode(), dtype.encode(), n, dims, data,
                                           array.nbytes))
            return
        if len(chunk.global_shape) != len(shape) or len(chunk.offsets) != len(shape):
            raise ValueError("shardguard: chunk '%s' has %d dims, global shape %s, offsets %s"
                             % (name, len(shape), chunk.global_shape, chunk.offsets))
        gshape, n = u64_array(chunk.global_shape)
        offsets, _ = u64_array(chunk.offsets)
        sizes, _ = u64_array(shape)
        check(lib.sg_writer_add_chunk(writer, name.encode(), dtype.encode(), n, gshape, offsets,
                                      sizes, data, array.nbytes))

    def wait(self):
        """Waits for a background (async) save; raises if it failed."""
        check(lib.sg_client_wait(self._h))

    # ---- resume ----
    def open_resume(self):
        """The Reader of the checkpoint to resume from, or None on a fresh start."""
        out = ctypes.c_void_p()
        status = lib.sg_client_open_resume(self._h, ctypes.byref(out))
        if status == NOT_FOUND:
            return None
        check(status)
        return Reader(out)

    def load(self, boxes=None, as_torch=None, restore_rng=True):
        """(step, state_dict, extra_state) from the checkpoint to resume from, or None on a
        fresh start. Tensors come back whole, or the box boxes[name] = (offsets, sizes);
        as torch tensors where they were saved from torch (as_torch=None), or all / none
        with True / False. Restores RNG states and the data loader position (also kept in
        self.data_position), and sets self.lr_schedule and self.global_state."""
        reader = self.open_resume()
        if reader is None:
            return None
        with reader:
            rng, position, user = reader.rank_state(self.rank)
            ours = isinstance(user, dict) and user.get(_MARK) == 1
            torch_names = set(user.get("torch", [])) if ours else set()
            extra = user.get("extra") if ours else user
            state = {}
            for name in reader.names():
                box = (boxes or {}).get(name, (None, None))
                to_torch = as_torch if as_torch is not None else name in torch_names
                state[name] = reader.read(name, box[0], box[1], as_torch=to_torch)
            g = reader.global_state()
            step = reader.step
        self.data_position = position
        self.lr_schedule, self.global_state = g["lr_schedule"], g["user"]
        if restore_rng and rng:
            _rng.restore(rng)
        if self.data_loader is not None and position is not None:
            self.data_loader.load_state_dict(position)
        return step, state, extra

    # ---- lifetime ----
    def close(self):
        """Waits for a background save and releases the client."""
        if getattr(self, "_h", None):
            h, self._h = self._h, None
            status = lib.sg_client_wait(h)
            lib.sg_client_free(h)
            _live.discard(self)
            check(status)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    @property
    def handle(self):
        return self._h


def _json(value):
    return json.dumps(value, separators=(",", ":"), allow_nan=False).encode()


__all__ = ["Checkpointer", "Chunk", "EXIT_AFTER_EMERGENCY", "ShardguardError"]
