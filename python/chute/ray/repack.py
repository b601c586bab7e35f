"""RemoteLoader's ``on_error='skip'``: chute.Loader's batches from the actors' short ones.

chute.Loader under ``'skip'`` leaves a bad sample out and fills its batch from the next samples, so every
later batch of the epoch holds other samples than it would without the error. RemoteLoader's actors make
the driver's batches independently, each a fixed slice of the epoch's order, and return a batch without its
bad samples (actor.py); :class:`Repack` joins the kept samples in epoch order and cuts them into
``batch_size`` batches again: chute.Loader's batches, sample for sample, and the same resume positions.

No copy in the common case: a batch that arrives whole while nothing is left over from an earlier one is
passed on as it is (every batch of an epoch without a bad sample). After a skipped sample, each batch is
joined from the rest of one driver batch and the start of the next (one copy per batch).
"""

from __future__ import annotations

from collections import deque

import numpy as np


class Repack:
    """Driver batches in, batch_size batches out, in epoch order. One consumer thread."""

    def __init__(self, batch_size: int, drop_last: bool):
        self._batch_size, self._drop_last = batch_size, drop_last
        self._pieces: deque[tuple[np.ndarray, np.ndarray, np.ndarray]] = deque()  # images, labels, positions
        self._held = 0  # samples in _pieces

    def add(self, images: np.ndarray | None, labels: np.ndarray | None, positions: np.ndarray) -> None:
        """A driver batch's kept samples, in order (their arrays' first axis), and their epoch positions."""
        if len(positions):
            self._pieces.append((images, labels, positions))
            self._held += len(positions)

    def take(self, final: bool) -> tuple[np.ndarray, np.ndarray, int, bool] | None:
        """The next batch as ``(images, labels, position, joined)``: ``position`` the epoch position after its
        last sample (where a resume starts), ``joined`` whether it was copied together from two driver
        batches. Once ``batch_size`` samples are here, or at the epoch's end (``final``: no driver batch is
        to come) the rest unless ``drop_last``; else None."""
        n = min(self._batch_size, self._held)
        if n == 0 or (n < self._batch_size and (not final or self._drop_last)):
            return None
        self._held -= n
        images, labels, positions = self._pieces[0]
        if len(positions) == n:  # a whole driver batch: passed on as it is
            self._pieces.popleft()
            return images, labels, int(positions[-1]) + 1, False
        parts = []
        while n:
            images, labels, positions = self._pieces[0]
            k = min(n, len(positions))
            parts.append((images[:k], labels[:k]))
            if k == len(positions):
                self._pieces.popleft()
            else:
                self._pieces[0] = (images[k:], labels[k:], positions[k:])
            n -= k
        end = int(positions[k - 1]) + 1
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]), end, True
