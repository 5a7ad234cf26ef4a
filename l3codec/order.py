"""Which samples a rank reads, in which order, for one epoch: deterministic, distributed, resumable.

    order = EpochOrder(len(dataset), batch_size=64, seed=0, rank=rank, world_size=world)
    order.set_epoch(epoch)
    for batch in order.batches(start=resumed_batches): ...   # arrays of sample indices

The epoch's order is one global permutation, a function of (seed, epoch) alone, so every
rank computes the same one without talking to the others; rank r takes positions
r, r + world_size, ... of it and reads only those samples. Every rank gets the same number
of batches, so no rank waits on a collective that another never reaches:

- drop_last=False (default): the order is padded to a multiple of world_size by repeating
  its first samples, so a few samples appear twice in an epoch; the last batch may be
  short, and is equally short on every rank.
- drop_last=False with world_size=1 pads nothing.
- drop_last=True: each rank keeps only whole batches; the samples left over (fewer than
  world_size * batch_size) are skipped this epoch, and a different set next epoch.

This module is numpy only (no torch), so it is reused by any loader and tested alone.
"""

from __future__ import annotations

import numpy as np

from .format import L3Error


class EpochOrder:
    """The batches of sample indices one rank reads in one epoch."""

    def __init__(
        self, length: int, /, *, batch_size: int, shuffle: bool = True, seed: int = 0, rank: int = 0,
        world_size: int = 1, drop_last: bool = False,
    ):
        if length < 1:
            raise L3Error("the dataset is empty")
        if batch_size < 1:
            raise L3Error(f"batch_size must be at least 1, not {batch_size}")
        if world_size < 1 or not 0 <= rank < world_size:
            raise L3Error(f"rank {rank} is not in 0..{world_size - 1}")
        if drop_last and length < world_size * batch_size:
            raise L3Error(
                f"drop_last with {length} samples leaves no whole batch of {batch_size} for {world_size} ranks"
            )
        self.length, self.batch_size, self.shuffle, self.seed = length, batch_size, shuffle, seed
        self.rank, self.world_size, self.drop_last = rank, world_size, drop_last
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def global_order(self) -> np.ndarray:
        """Every sample index once, in this epoch's order (the same on every rank)."""
        if not self.shuffle:
            return np.arange(self.length, dtype=np.int64)
        return np.random.default_rng([self.seed, self.epoch]).permutation(self.length).astype(np.int64)

    def rank_indices(self) -> np.ndarray:
        """The sample indices this rank reads this epoch, in order."""
        order = self.global_order()
        if self.drop_last:
            per_rank = self.length // self.world_size // self.batch_size * self.batch_size
        else:
            per_rank = -(-self.length // self.world_size)
        order = np.resize(order, per_rank * self.world_size)  # np.resize repeats the start to pad
        return order[self.rank::self.world_size]

    def __len__(self) -> int:
        """Batches per rank this epoch (the same on every rank)."""
        if self.drop_last:
            return self.length // self.world_size // self.batch_size
        return -(-(-(-self.length // self.world_size)) // self.batch_size)

    def batches(self, start: int = 0) -> list:
        """This rank's batches from batch number `start` on (a resumed epoch skips the first ones)."""
        if not 0 <= start <= len(self):
            raise L3Error(f"cannot resume at batch {start} of an epoch of {len(self)} batches")
        indices = self.rank_indices()
        size = self.batch_size
        return [indices[b * size:(b + 1) * size] for b in range(start, len(self))]


def sample_rng(seed: int, epoch: int, index: int) -> np.random.Generator:
    """The random generator of one sample's augmentation: the same wherever and whenever it is drawn."""
    return np.random.default_rng([seed, epoch, index, 0x13])
