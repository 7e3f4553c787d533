"""Checkpointer: the Python trainer's side of shardguard, over libshardguard.so.

    ckpt = Checkpointer("checkpoints", every_steps=100)
    restored = ckpt.load()                      # None on a fresh start
    if restored:
        model.load_state_dict(restored.state["model"])
        opt.load_state_dict(restored.state["optim"])
        sched.load_state_dict(restored.state["sched"])
    for step in range((restored.step if restored else 0) + 1, steps + 1):
        train(step); ckpt.heartbeat(step)
        if ckpt.should_checkpoint(step):        # on every rank
            ckpt.save(step, {"model": model.state_dict(), "optim": opt.state_dict(),
                             "sched": sched.state_dict(), "step": step})
        if ckpt.should_exit():                  # after an emergency save
            sys.exit(EXIT_AFTER_EMERGENCY)

save() takes a PyTorch user's state as it is (see _tree.py): nested dicts (str or int keys),
lists and tuples of tensors, numbers, strings and None; functions (OneCycleLR's anneal_func)
are dropped for load_state_dict to keep its own. Tensors go to the shards, the rest to the
manifest, and load() gives the same structure back on every rank, as torch tensors where
torch tensors were saved. Every rank calls save() for the same steps:
  - a plain tensor is replicated (DDP: every rank holds the same one): it is written once in
    total, its rows split across the ranks (_plan.py);
  - Chunk(value, global_shape, offsets), or a ShardedTensor, is this rank's piece of a
    tensor sharded across ranks (a parameter-sharded model); load() assembles whole
    tensors, or reads each rank's own box (boxes=dim0_boxes(rank, world), or a template);
  - the rest of the state is rank 0's and reaches every rank; save(..., rank_state=...) is
    each rank's own (tensors too), given back to that rank, or {} to a rank that did not
    exist when the checkpoint was written.
With torch.distributed initialised, the ranks check at each save that they save the same
structure, and a rank whose peers never call save() says so every few seconds and then
refuses (_collective.py). RNG states (random, numpy, torch CPU) and the data loader's
position (data_loader=DataPosition(loader), data.py) are saved per rank and restored. A
resume checkpoint that fails verification is reported to the supervisor, and the rank exits
with EXIT_RESUME_FAILED (74) so that it resumes from the previous one. Thread-safety: use a
Checkpointer from one thread (the training loop).
"""

import collections
import ctypes
import json
import logging
import signal
import time
import weakref

from . import _collective, _leaves, _load, _plan, _progress, _rng, _tree
from ._lib import CANCELLED, NOT_FOUND, ShardguardError, check, lib, text
from .reader import Reader

log = logging.getLogger("shardguard")

# What a job exits with after an emergency checkpoint (EX_TEMPFAIL: requeue me), and after
# reporting that its resume checkpoint is corrupt (EX_IOERR): shardguard.h's values.
EXIT_AFTER_EMERGENCY = 75
EXIT_RESUME_FAILED = 74

class _ResumeReader(Reader):
    """The resume checkpoint's Reader (Checkpointer.open_resume): a block that fails its
    checksum while a rank reads it is reported to the supervisor like a checkpoint that fails
    at open, whatever code does the reading; under shardguard the rank then exits with
    EXIT_RESUME_FAILED so that the job resumes from the previous checkpoint."""

    def __init__(self, handle, on_corrupt):
        super().__init__(handle)
        self.on_corrupt = on_corrupt

    def read_into(self, *args, **kwargs):
        try:
            return super().read_into(*args, **kwargs)
        except ShardguardError as e:
            if e.status == "CORRUPT" and self.on_corrupt is not None:
                self.on_corrupt(self, e)
            raise


# A piece of a tensor split across ranks: `value` holds the box at `offsets`.
Chunk = collections.namedtuple("Chunk", ["value", "global_shape", "offsets"])

_MARK = _load.MARK
_live = weakref.WeakSet()  # every open Checkpointer, for the guard


def live_checkpointers():
    return list(_live)


class Restored(tuple):
    """What load() returns: (step, state, rank_state), also as attributes, plus
    world_size (of the checkpoint), rank_state_saved (False: this rank had none, e.g. it is
    new after a world-size change, and rank_state is {}), data_position and manifest."""

    def __new__(cls, step, state, rank_state, **info):
        self = super().__new__(cls, (step, state, rank_state))
        self.__dict__.update(info)
        return self

    step = property(lambda self: self[0])
    state = property(lambda self: self[1])
    rank_state = property(lambda self: self[2])

    def __reduce__(self):
        # pickle, copy and multiprocessing rebuild a tuple subclass from tuple(self) alone,
        # which __new__ cannot take: the three items, then the attributes as the state.
        return (self.__class__, (self[0], self[1], self[2]), dict(self.__dict__))


class ResumeFailed(ShardguardError):
    """The resume checkpoint could not be read (outside shardguard, where no supervisor can
    set it aside); under shardguard the rank exits with EXIT_RESUME_FAILED instead."""


class Checkpointer:
    """One rank's checkpoints. checkpoint_dir, every_steps and async_save are defaults that
    SHARDGUARD_* variables override. data_loader (optional) has state_dict() and
    load_state_dict(), e.g. DataPosition(loader). capture_rng saves and restores the RNG
    states. split_bytes: replicated tensors from this size up are split across ranks.
    arrival_timeout: seconds a save waits for the other ranks' save() before refusing
    (None: never refuse; the wait is logged either way)."""

    def __init__(self, checkpoint_dir=None, every_steps=0, async_save=False, data_loader=None,
                 capture_rng=True, split_bytes=_plan.DEFAULT_SPLIT_BYTES, arrival_timeout=60.0):
        if data_loader is not None and not (hasattr(data_loader, "state_dict") and
                                            hasattr(data_loader, "load_state_dict")):
            raise TypeError(
                "shardguard: data_loader=%s has no state_dict()/load_state_dict() (torch's "
                "DataLoader has none); pass shardguard.DataPosition(loader) and iterate that "
                "instead of the loader" % type(data_loader).__name__)
        out = ctypes.c_void_p()
        check(lib.sg_client_from_env(None if checkpoint_dir is None else str(checkpoint_dir)
                                     .encode(), int(every_steps), 1 if async_save else 0,
                                     ctypes.byref(out)))
        self._h = out
        self.data_loader = data_loader
        self.capture_rng = capture_rng
        self.split_bytes = int(split_bytes)
        self.arrival_timeout = arrival_timeout
        # Filled by load(): the job state saved beside the tensors.
        self.data_position = None
        self.lr_schedule = None
        self.global_state = None
        # A caught signal the client could not take (it handles no signal): saved and
        # exited after here instead.
        self._fallback_step = None
        self._fallback_exit = False
        self._saves = 0          # save() calls so far: numbers the ranks' meetings
        self._owed = None        # a step should_checkpoint() said to save, not saved yet
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
    def heartbeat(self, step, loss=None, grad_norm=None):
        """Tells the supervisor this rank reached `step`. `loss` and `grad_norm` (floats, or
        0-d tensors: they are read with float()) feed its divergence guard: a NaN or a spike
        rolls the run back to the checkpoint before it (see docs/oncall.md)."""
        self._check_owed(step)
        for name, value in (("loss", loss), ("grad_norm", grad_norm)):
            if value is not None:
                check(lib.sg_client_report_scalar(self._h, name.encode(), int(step), float(value)))
        lib.sg_client_heartbeat(self._h, int(step))

    def _check_owed(self, step):
        # A rank that was told to save a step and went on without saving it leaves the
        # other ranks' save (and rank 0's commit) waiting: say so where it happens.
        if self._owed is not None and int(step) > self._owed:
            log.warning("shardguard rank %d: should_checkpoint(%d) was True but save() was not "
                        "called for it; every rank must call save() for the steps it is told "
                        "to save (the others wait for it)", self.rank, self._owed)
            # The meeting this save() would have joined hears it at once (rank 0's save() is
            # refused now rather than after arrival_timeout), and this rank's count of
            # meetings stays in step with the others'.
            self._saves += 1
            store = _collective.default_store(self.world_size) if self.world_size > 1 else None
            if store is not None:
                _collective.post_skip(store, self.job_id, self.attempt, self.rank, self._saves,
                                      self._owed)
            self._owed = None

    def should_checkpoint(self, step):
        """True when `step` must be saved: the schedule, the agent, or a signal (caught by
        the client or by a PreemptionGuard)."""
        from . import guard
        self._check_owed(step)
        pending = guard.take_pending()
        if signal.SIGTERM in pending and lib.sg_client_notify_sigterm(self._h) == 0:
            pending.discard(signal.SIGTERM)  # the client tells the supervisor
        if pending and lib.sg_client_notify_signal(self._h) != 0:
            if self._fallback_step is None:
                self._fallback_step = int(step)
        if self._fallback_step is not None and not self._fallback_exit:
            return True
        due = bool(lib.sg_client_should_checkpoint(self._h, int(step)))
        if due:
            self._owed = int(step)
        return due

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
    def save(self, step, state, extra_state=None, data_position=None, lr_schedule=None,
             global_state=None, chunks=None, reason=None, rank_state=None):
        """Saves `state` at `step` (see the module doc; every rank calls it), with this
        rank's RNG states, data loader position and `rank_state` (its own, any state tree)
        or `extra_state` (its own, plain JSON); rank 0 also saves lr_schedule and
        global_state (plain JSON) and commits. chunks={key: (global_shape, offsets)} marks
        top-level tensors as chunks. `reason`: None, "periodic", "final", "manual",
        "emergency". Returns True when written (sync) or snapshotted (async), False when
        the supervisor abandoned this save (a later step is asked for). Raises TypeError or
        ValueError naming the key path of what cannot be saved, SaveRefused when the ranks
        disagree, ShardguardError when the library fails."""
        step = int(step)
        if chunks:
            state = {k: Chunk(v, *chunks[k]) if k in chunks else v for k, v in state.items()}
        tree, leaves = _tree.flatten(state)
        rank_tree = None
        if rank_state is not None:
            rank_tree, rank_leaves = _tree.flatten(rank_state, prefix="@rank%05d/" % self.rank,
                                                   root_name="rank_state", plain_layout="rank")
            leaves = leaves + rank_leaves
        infos = [_leaves.describe(leaf, _where(leaf)) for leaf in leaves]
        # Only ranks that checked they hold the same state split its writing; otherwise rank
        # 0 writes every replicated tensor (its tree is the one every rank loads).
        if self._meet(step, infos):
            plan_rank, plan_world = self.rank, self.world_size
        else:
            plan_rank, plan_world = (0 if self.rank == 0 else None), 1
        if data_position is None and self.data_loader is not None:
            data_position = self.data_loader.state_dict()
        writer = ctypes.c_void_p()
        check(lib.sg_client_begin_save(self._h, step, ctypes.byref(writer)))
        keep = []  # arrays the library reads until sg_client_save returns
        try:
            _leaves.add_leaves(writer, infos, plan_rank, plan_world, self.split_bytes, keep)
            user = {_MARK: 1, "extra": extra_state}
            rng = _rng.capture() if self.capture_rng else b""
            check(lib.sg_writer_set_rank_state(writer, rng, len(rng), _json(data_position),
                                               _json(user)))
            if rank_tree is not None:
                check(lib.sg_writer_set_rank_tree(writer, _json(rank_tree)))
            if self.rank == 0:
                check(lib.sg_writer_set_global_state(writer, step, _json(lr_schedule),
                                                     _json(global_state)))
                check(lib.sg_writer_set_global_tree(writer, _json(tree)))
        except BaseException:
            lib.sg_writer_free(writer)
            raise
        emergency = self._fallback_step is not None and reason is None
        why = b"emergency" if emergency else reason.encode() if reason else None
        with _progress.Watch(self.checkpoint_dir, step, self.rank, self.world_size):
            status = lib.sg_client_save(self._h, writer, why)
        del keep
        self._owed = None
        if status == CANCELLED:
            # Abandoned by the supervisor (every rank now saves a later step, or another
            # rank's save failed): nothing was committed; training goes on and the next
            # should_checkpoint() names the step to save, as with the C++ client.
            log.warning("shardguard: the save of step %d was abandoned: %s", step,
                        lib.sg_last_error().decode("utf-8", "replace"))
            return False
        check(status)
        if emergency:
            self._fallback_exit = True
        return True

    def _meet(self, step, infos):
        """The ranks' check before a save (torch.distributed only; see _collective.py);
        True when it ran (so every rank saves the same replicated tensors)."""
        self._saves += 1
        store = _collective.default_store(self.world_size) if self.world_size > 1 else None
        if store is None:
            return False
        sig = _collective.signature(step, [(i.name, i.layout, i.dtype, i.shape) for i in infos])
        deadline = None
        e = self.emergency()
        if e is not None:
            deadline = time.monotonic() + max(e["deadline_unix_ms"] / 1000.0 - time.time(), 1.0)
        meeting = _collective.Meeting(store, self.job_id, self.attempt, self.rank,
                                      self.world_size, self._saves, sig)
        meeting.run(self.arrival_timeout, deadline)
        return True

    def wait(self):
        """Waits for a background (async) save; raises if it failed."""
        check(lib.sg_client_wait(self._h))

    def reserve(self, nbytes):
        """Sizes the staging memory of async saves for a shard of `nbytes` and populates it
        in the background, so that the first save stalls no longer than later ones. Call it
        at start-up; an async Checkpointer does it itself from the checkpoint it resumes
        from, or from SHARDGUARD_STAGING_BYTES."""
        check(lib.sg_client_reserve(self._h, int(nbytes)))

    # ---- resume ----
    def open_resume(self):
        """The Reader of the checkpoint to resume from, or None on a fresh start."""
        out = ctypes.c_void_p()
        status = lib.sg_client_open_resume(self._h, ctypes.byref(out))
        if status == NOT_FOUND:
            return None
        try:
            check(status)
        except ShardguardError as e:
            if e.status == "CORRUPT":
                self._resume_failed(None, e)
            raise
        return _ResumeReader(out, self._resume_failed)

    @property
    def resume_manifest(self):
        """The manifest load() reads (None on a fresh start)."""
        return text(lib.sg_client_resume_manifest(self._h)) or None

    def load(self, boxes=None, as_torch=None, restore_rng=True, template=None,
             exit_on_corrupt=None):
        """Restored(step, state, rank_state) from the checkpoint to resume from, or None on a
        fresh start (see the module doc and _load.py for boxes and template). Restores the
        RNG states (this rank's, when it saved any) and the data loader position (this
        rank's, or rank 0's on a rank that is new after a world-size change), also kept in
        self.data_position; sets self.lr_schedule and self.global_state. A checkpoint that
        fails verification is reported to the supervisor; then the process exits with
        EXIT_RESUME_FAILED under shardguard (exit_on_corrupt=None), or ResumeFailed is
        raised."""
        reader = self.open_resume()
        if reader is None:
            return None
        reader.on_corrupt = None  # load() reports it itself, by exit_on_corrupt
        with reader:
            try:
                got = _load.read_state(reader, self.rank, boxes, as_torch, template)
            except ShardguardError as e:
                if e.status == "CORRUPT":
                    self._resume_failed(reader, e, exit_on_corrupt)
                raise
            own = self.rank < reader.world_size
            rng, position, _ = reader.rank_state(self.rank if own else 0)
            if not own:
                rng = b""  # another rank's RNG: this rank keeps its own seed
            g = reader.global_state()
            step, world = reader.step, reader.world_size
        self.data_position = position
        self.lr_schedule, self.global_state = g["lr_schedule"], g["user"]
        rng_restored = bool(restore_rng and rng) and _rng.restore(rng)
        if self.data_loader is not None and position is not None:
            self.data_loader.load_state_dict(position)
        return Restored(step, got.state, got.rank_state, world_size=world,
                        rank_state_saved=got.rank_state_saved, data_position=position,
                        rng_restored=rng_restored, manifest=self.resume_manifest)

    def _resume_failed(self, reader, error, exit_now=None):
        """Reports a corrupt resume checkpoint; exits with EXIT_RESUME_FAILED under
        shardguard (or when exit_now), else raises ResumeFailed."""
        where = reader.checksum_failure() if reader is not None else None
        check(lib.sg_client_report_resume_failure(
            self._h, reader.handle if reader is not None else None, str(error).encode()))
        detail = " (%s at offset %s)" % where if where else ""
        message = ("shardguard rank %d: the resume checkpoint %s cannot be read%s: %s"
                   % (self.rank, self.resume_manifest, detail, error))
        if exit_now is None:
            exit_now = self.under_shardguard
        if exit_now:
            log.error("%s; reported to the supervisor, exiting with %d so that it resumes "
                      "from the previous checkpoint", message, EXIT_RESUME_FAILED)
            raise SystemExit(EXIT_RESUME_FAILED)
        raise ResumeFailed(error.code, message) from error

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


def _where(leaf):
    root = "rank_state" if leaf.layout == "rank" else "state"
    return root + "".join("[%r]" % (k,) for k in leaf.path)


__all__ = ["Checkpointer", "Chunk", "EXIT_AFTER_EMERGENCY", "EXIT_RESUME_FAILED", "Restored",
           "ResumeFailed", "ShardguardError"]
