"""Every rank's save() meets the others' before writing, through torch.distributed's store.

With torch.distributed initialised and more than one rank, save() is collective: every rank
posts what it is about to save (step and a hash of the tensor names, layouts, dtypes and
shapes) under a key numbered by its count of save() calls, then rank 0 waits for every
rank's post and each other rank for rank 0's. While waiting, a rank logs every few seconds
who is missing and what to do; after `arrival_timeout` seconds it refuses the save
(SaveRefused) instead of hanging: the usual cause is a save() on rank 0 alone
(`if rank == 0: ckpt.save(...)`), whose commit can never see the other ranks' parts while
they wait in the next collective. A rank that goes past a step should_checkpoint() told it
to save, without calling save(), posts that (post_skip, from heartbeat() or the next
should_checkpoint()), and the ranks waiting for it refuse at once. A rank whose state differs from rank 0's refuses at once,
naming the first difference. Without torch.distributed nothing is exchanged (numpy
trainers and hand-started ranks): then rank 0 writes every replicated tensor itself, and
the commit's own wait logs the missing ranks.

Uses only the store (TCP requests to rank 0's store server), never a collective, so it
cannot deadlock with the training loop's collectives. Thread-safety: called from the
training thread.
"""

import hashlib
import json
import logging
import sys
import time

from ._lib import ShardguardError

log = logging.getLogger("shardguard")

LOG_EVERY_S = 5.0
_POLL_S = 0.02
_INVALID = 4  # sg_status SG_ERR_INVALID


class SaveRefused(ShardguardError):
    """save() could not start: the ranks do not agree on what to save, or some rank never
    called save(). The message says which and what to do."""

    def __init__(self, message):
        super().__init__(_INVALID, message)


def default_store(world):
    """The default process group's store, or None without torch.distributed (or when its
    world is not shardguard's)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    dist = getattr(torch, "distributed", None)
    try:
        if dist is None or not dist.is_available() or not dist.is_initialized():
            return None
        if dist.get_world_size() != world:
            return None
        return dist.distributed_c10d._get_default_store()
    except (AttributeError, RuntimeError):
        return None


def signature(step, leaves):
    """What every rank must agree on: the step and each shared tensor's name, layout, dtype
    and global shape (rank-local tensors are each rank's own business)."""
    entries = []
    for name, layout, dtype, shape in sorted(leaves):
        if layout != "rank":
            entries.append([name, layout, dtype, list(shape)])
    return {"step": int(step), "tensors": entries}


def _digest(sig):
    return hashlib.sha256(json.dumps(sig, sort_keys=True).encode()).hexdigest()


def first_difference(mine, theirs):
    """A sentence naming the first difference between two signatures."""
    if mine["step"] != theirs["step"]:
        return "rank 0 saves step %d, this rank step %d" % (theirs["step"], mine["step"])
    a = {t[0]: t[1:] for t in mine["tensors"]}
    b = {t[0]: t[1:] for t in theirs["tensors"]}
    for name in sorted(set(a) | set(b)):
        if name not in b:
            return "tensor '%s' is saved here but not by rank 0" % name
        if name not in a:
            return "tensor '%s' is saved by rank 0 but not here" % name
        if a[name] != b[name]:
            return "tensor '%s' is %s %s %s here but %s %s %s on rank 0" % (
                name, a[name][0], a[name][1], a[name][2], b[name][0], b[name][1], b[name][2])
    return "the states differ"


def _base(job, attempt, seq):
    return "shardguard/%s/%d/save-%d/" % (job, attempt, seq)


def post_skip(store, job, attempt, rank, seq, step):
    """This rank went past `step` without calling save() although should_checkpoint(step)
    said to: the ranks waiting in meeting `seq` refuse at once instead of after
    arrival_timeout."""
    base = _base(job, attempt, seq)
    key = base + "rank-%d/skipped" % rank
    store.set(key, str(int(step)))
    store.add(key + "/n", 1)  # add(key, 0) reads it without blocking (no check() in 1.13)
    store.add(base + "skipped", 1)


class Meeting:
    """One save()'s meeting of the ranks. `store`: a torch.distributed Store."""

    def __init__(self, store, job, attempt, rank, world, seq, sig):
        self.store, self.rank, self.world = store, rank, world
        self.sig = sig
        self.base = _base(job, attempt, seq)
        self.step = sig["step"]

    def _key(self, rank):
        return self.base + "rank-%d" % rank

    def _posted(self, rank):
        # add(key, 0) reads a counter without blocking (torch 1.13's Store has no check()).
        return self.store.add(self._key(rank) + "/posted", 0) > 0

    def _all_here(self):
        # Rank 0 counts arrivals (one request per poll whatever the world size); the others
        # wait for rank 0's post only.
        if self.rank == 0:
            return self.store.add(self.base + "arrived", 0) >= self.world
        return self._posted(0)

    def _missing(self):
        waited = range(1, self.world) if self.rank == 0 else [0]
        return [r for r in waited if not self._posted(r)]

    def run(self, arrival_timeout, deadline_mono=None):
        """Posts this rank's signature and waits for the others (rank 0) or for rank 0's;
        raises SaveRefused on a difference or when the wait runs out."""
        digest = _digest(self.sig)
        if self.rank == 0:  # before its own post, so that a rank seeing the post finds it
            self.store.set(self.base + "signature", json.dumps(self.sig))
        self.store.set(self._key(self.rank), digest)
        self.store.add(self._key(self.rank) + "/posted", 1)
        self.store.add(self.base + "arrived", 1)
        start = time.monotonic()
        limit = None if arrival_timeout is None else start + arrival_timeout
        if deadline_mono is not None:
            limit = deadline_mono if limit is None else min(limit, deadline_mono)
        next_log = start + LOG_EVERY_S
        while not self._all_here():
            self._check_skipped()
            now = time.monotonic()
            if limit is not None and now >= limit:
                raise SaveRefused(self._missing_message(self._missing(), now - start, final=True))
            if now >= next_log:
                log.warning("%s", self._missing_message(self._missing(), now - start, final=False))
                next_log += LOG_EVERY_S
            time.sleep(_POLL_S)
        self._compare(digest)

    def _check_skipped(self):
        """Refuses at once when a rank this one waits for went past its save without calling
        save() (Checkpointer posts that from heartbeat() or should_checkpoint())."""
        if self.store.add(self.base + "skipped", 0) == 0:
            return
        waited = range(1, self.world) if self.rank == 0 else [0]
        skipped = {}
        for r in waited:
            if self._posted(r):
                continue
            key = self._key(r) + "/skipped"
            if self.store.add(key + "/n", 0) > 0:
                skipped[r] = self.store.get(key).decode()
        if not skipped:
            return
        who = ", ".join("rank %d (at step %s)" % (r, s) for r, s in sorted(skipped.items()))
        if self.rank == 0:
            raise SaveRefused(
                "shardguard rank 0: save(step=%d) refused: %s went past the step without "
                "calling save(), although should_checkpoint() said to save it there. Every rank "
                "must call save() with the same state (replicated tensors are written once in "
                "total, split across the ranks): a save on rank 0 alone cannot commit a "
                "checkpoint of %d ranks. Write `if ckpt.should_checkpoint(step): "
                "ckpt.save(step, state)` on every rank, without `if rank == 0`"
                % (self.step, who, self.world))
        raise SaveRefused(
            "shardguard rank %d: save(step=%d) refused: %s went past the step without calling "
            "save(); every rank must call save() for the same steps" % (self.rank, self.step, who))

    def _compare(self, digest):
        if self.rank != 0:
            theirs = self.store.get(self._key(0)).decode()
            sig0 = None
            if theirs != digest:
                sig0 = json.loads(self.store.get(self.base + "signature").decode())
            self.store.add(self.base + "read", 1)  # rank 0 may go away now (it hosts the store)
            if sig0 is not None:
                raise SaveRefused(
                    "shardguard rank %d: save(step=%d) does not match rank 0's: %s. Every rank "
                    "must save the same structure (the same keys, dtypes and shapes; sharded "
                    "tensors as Chunks of the same global shape); put what differs per rank in "
                    "save(..., rank_state=...)" % (self.rank, self.step,
                                                    first_difference(self.sig, sig0)))
            return
        differ = [r for r in range(1, self.world)
                  if self.store.get(self._key(r)).decode() != digest]
        if differ:
            # The others read rank 0's signature before it raises (and its store may close).
            deadline = time.monotonic() + 10
            while self.store.add(self.base + "read", 0) < self.world - 1 and \
                    time.monotonic() < deadline:
                time.sleep(_POLL_S)
            raise SaveRefused(
                "shardguard rank 0: save(step=%d): ranks %s save another structure than rank 0 "
                "(their own logs name the difference); every rank must save the same keys, "
                "dtypes and shapes" % (self.step, _ranks(differ)))

    def _missing_message(self, missing, waited, final):
        if self.rank == 0:
            text = ("shardguard rank 0: save(step=%d) has waited %.0f s for rank(s) %s to call "
                    "save(). Every rank must call save() with the same state (replicated "
                    "tensors are written once in total, split across the ranks): a save on "
                    "rank 0 alone cannot commit a checkpoint of %d ranks while the others "
                    "wait in the next collective. Write `if ckpt.should_checkpoint(step): "
                    "ckpt.save(step, state)` on every rank, without `if rank == 0`"
                    % (self.step, waited, _ranks(missing), self.world))
        else:
            text = ("shardguard rank %d: save(step=%d) has waited %.0f s for rank 0 to call "
                    "save(); every rank must call save() for the same steps"
                    % (self.rank, self.step, waited))
        if final:
            text += " (refused after %.0f s: Checkpointer(arrival_timeout=...))" % waited
        return text


def _ranks(ranks):
    if len(ranks) > 8:
        return "%s ... (%d in all)" % (", ".join(map(str, ranks[:8])), len(ranks))
    return ", ".join(map(str, ranks))
