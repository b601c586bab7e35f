"""What the datasets of chute.formats share: records read back as stored, and the files behind them."""

from __future__ import annotations

import os

from chute.sources import RecordSource


class FormatDataset(RecordSource):
    """A dataset read in place by a native ``SpanSource``. ``kind`` names the format (``chute inspect``)."""

    kind = ""

    def files(self) -> list[dict]:
        """Each file: its path, samples (when it is one shard), bytes, and where its index is cached."""
        source = self._native
        sizes = source.shard_sizes()
        names, indexes = source.part_names(), source.index_paths()
        if len(sizes) != len(names):  # shards that are not one per file (LMDB's): the files alone
            sizes = [None] * len(names)
        return [
            {"file": n, "records": s, "bytes": os.path.getsize(n), "index": i or None}
            for n, s, i in zip(names, sizes, indexes)
        ]

    @property
    def bad_samples(self) -> list[tuple[int, str]]:
        """Samples whose records the scan could not read (index, why): their reads fail, and the loader's
        ``on_error`` decides, as for a corrupt image."""
        return [tuple(b) for b in self._native.bad_samples()]
