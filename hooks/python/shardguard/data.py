"""DataPosition: where a torch DataLoader is in its data, so that a resume continues exactly.

    loader = DataLoader(ds, batch_size=32, sampler=DistributedSampler(ds, seed=0))
    position = shardguard.DataPosition(loader)        # gives the loader its own generator
    ckpt = shardguard.Checkpointer(data_loader=position)
    restored = ckpt.load()                            # restores the position too
    for epoch in position.epochs(num_epochs):         # calls sampler.set_epoch(epoch)
        for batch in position:                        # the rest of this epoch
            ...train...; step += 1; ckpt.heartbeat(step)
            if ckpt.should_checkpoint(step): ckpt.save(step, state)

The position is (epoch, batches handed out in this epoch, the loader's generator state at
the epoch's start). A resume re-creates the epoch's iterator from that generator state (the
same shuffle, the same worker seeds) and skips the batches already consumed, without
loading them when the loader runs in the main process (num_workers=0; with workers the
skipped batches are loaded and dropped). A DataLoader draws a seed for each iterator from
its `generator`, or from torch's global RNG when it has none, and a RandomSampler without a
generator draws from the global RNG too: so that a resumed run draws exactly what an
uninterrupted one does (dropout, noise), DataPosition gives both a torch.Generator of their
own, seeded from `seed` (default: torch.initial_seed(), i.e. your torch.manual_seed).
DistributedSampler orders each epoch by its seed and set_epoch(), which this calls.

SHARDGUARD_SKIP_BATCHES=N (set by `shardguard run` on the relaunch after a rollback past bad
data): the first N batches after the resume position are consumed without being handed
out, once per process, and logged.

A world-size change keeps (epoch, batches): each rank then continues its new share of the
epoch after as many batches as each old rank had consumed. Thread-safety: one thread.
"""

import base64
import logging
import os

log = logging.getLogger("shardguard")

FORMAT = "shardguard.data_position/1"
SKIP_ENV = "SHARDGUARD_SKIP_BATCHES"


def _torch():
    import torch
    return torch


def _generator_state(g):
    return base64.b64encode(g.get_state().numpy().tobytes()).decode()


def _set_generator_state(g, text):
    torch = _torch()
    raw = bytearray(base64.b64decode(text))
    g.set_state(torch.frombuffer(raw, dtype=torch.uint8).clone())


def skip_batches_from_env():
    """SHARDGUARD_SKIP_BATCHES as a count (0 when unset); ValueError when malformed."""
    text = os.environ.get(SKIP_ENV, "").strip()
    if not text:
        return 0
    if not text.isdigit():
        raise ValueError("%s=%r: expected a number of batches" % (SKIP_ENV, text))
    return int(text)


class DataPosition:
    """Tracks and restores a DataLoader's position; see the module doc."""

    def __init__(self, loader, seed=None):
        torch = _torch()
        self.loader = loader
        gen = getattr(loader, "generator", None)
        if gen is None:
            gen = torch.Generator()
            gen.manual_seed(torch.initial_seed() if seed is None else int(seed))
            loader.generator = gen
        sampler = getattr(loader, "sampler", None)
        if sampler is not None and hasattr(sampler, "generator") and sampler.generator is None:
            sampler.generator = gen  # a RandomSampler would draw from the global RNG
        self.generator = gen
        self.epoch = 0
        self.batches = 0  # handed out (or skipped) in this epoch
        self._epoch_start = None  # generator state before this epoch's iterator
        self._iter = None
        self._resume_at = 0        # batches to move past when the iterator is made
        self._pending_skip = None  # SHARDGUARD_SKIP_BATCHES, applied once
        self.skipped = 0           # batches skipped for it so far

    # ---- the loop ----
    def epochs(self, num_epochs):
        """Yields epoch numbers from the current one up to num_epochs - 1."""
        while self.epoch < num_epochs:
            epoch = self.epoch
            yield epoch
            # Iterating to the end moved to the next epoch already; a body that did not
            # iterate at all still ends its epoch. One that stopped early (a break) gets the
            # same epoch again and continues it.
            if self.epoch == epoch and self._iter is None and self.batches == 0:
                self._next_epoch()

    def __iter__(self):
        """The rest of the current epoch's batches; afterwards the position is the start of
        the next epoch."""
        self._start_iterator()
        while True:
            if self._take_skip():
                continue
            try:
                batch = next(self._iter)
            except StopIteration:
                break
            self.batches += 1
            yield batch
        self._next_epoch()

    def __len__(self):
        return len(self.loader)

    # ---- state ----
    def state_dict(self):
        start = self._epoch_start if self._epoch_start is not None else _generator_state(
            self.generator)
        return {"format": FORMAT, "epoch": self.epoch, "batches": self.batches,
                "generator": start}

    def load_state_dict(self, state):
        if not isinstance(state, dict) or state.get("format") != FORMAT:
            raise ValueError("shardguard: %r is not a DataPosition state" % (state,))
        epoch, batches = int(state["epoch"]), int(state["batches"])
        if epoch < 0 or batches < 0:
            raise ValueError("shardguard: data position %r is negative" % (state,))
        _set_generator_state(self.generator, state["generator"])
        self._epoch_start = state["generator"]
        self.epoch, self.batches = epoch, batches
        self._iter = None
        self._resume_at = batches

    # ---- inside ----
    def _start_iterator(self):
        if self._iter is not None:
            return
        if self._epoch_start is None:
            self._epoch_start = _generator_state(self.generator)
        else:
            _set_generator_state(self.generator, self._epoch_start)
        if hasattr(self.loader.sampler, "set_epoch"):
            self.loader.sampler.set_epoch(self.epoch)
        elif hasattr(getattr(self.loader, "batch_sampler", None), "set_epoch"):
            self.loader.batch_sampler.set_epoch(self.epoch)
        self._iter = iter(self.loader)
        consumed, self._resume_at = self._resume_at, 0
        if consumed:
            self._advance(consumed)
        if self._pending_skip is None:
            self._pending_skip = skip_batches_from_env()
            if self._pending_skip:
                log.warning("shardguard: skipping %d batches after epoch %d batch %d (%s)",
                            self._pending_skip, self.epoch, self.batches, SKIP_ENV)

    def _advance(self, n):
        """Moves the iterator past up to n batches, without loading them where possible;
        returns how many it moved past (fewer at the end of the epoch)."""
        it = self._iter
        cheap = type(it).__name__ == "_SingleProcessDataLoaderIter" and hasattr(it, "_next_index")
        for done in range(n):
            try:
                if cheap:
                    it._next_index()  # the indices only: no sample is loaded
                    it._num_yielded += 1
                else:
                    next(it)
            except StopIteration:
                return done
        return n

    def _take_skip(self):
        """Skips one batch for SHARDGUARD_SKIP_BATCHES if any is left; True if it did."""
        if not self._pending_skip or self._advance(1) == 0:
            return False
        self.batches += 1
        self._pending_skip -= 1
        self.skipped += 1
        return True

    def _next_epoch(self):
        self.epoch += 1
        self.batches = 0
        self._iter = None
        self._epoch_start = _generator_state(self.generator)
