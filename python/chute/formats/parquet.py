"""Parquet files as Hugging Face ``datasets`` (``to_parquet``, the Hub's ``data/train-0000x-of-0000N.parquet``)
and pyarrow write them, read in place where their pages allow it.

An image column stored uncompressed and PLAIN-encoded (what ``datasets`` writes for an ``Image`` feature, so
that the Hub can deduplicate it) is read by offset from the file's own mapping: pyarrow's footer gives each
row group's column chunk, chute's page reader (cpp/include/chute/formats/parquet_pages.h) each value's place.
A compressed or dictionary-encoded one (pyarrow's defaults, older ``datasets``) cannot be read by offset:
pyarrow decodes it once, a row group at a time, into a decoded copy that chute owns in its cache
(``<cache>/parquet-decoded/``, reused while the file is unchanged), which is then read the same way."""

from __future__ import annotations

import glob as _glob
import hashlib
import os
import re

import numpy as np

from chute import _native, _validate
from chute.cache import resolve_cache_dir
from chute.formats.arrow_columns import binary_spans, hf_features, labels_of, null_reasons, pick_columns
from chute.formats.base import FormatDataset, check_keys, require

_SPLIT = re.compile(r"^(.+?)-\d+-of-\d+\.parquet$")  # the Hub's "train-00000-of-00004.parquet"
_IN_PLACE = {"PLAIN", "RLE", "BIT_PACKED"}  # value and level encodings a page of offsets may use


def parquet_files(path: str) -> list[str]:
    """The Parquet files ``path`` names (a .parquet file, a glob of them, or a directory holding them,
    sorted), else []. A directory of several splits (the Hub's train-* and test-*) is an error: name one."""
    if any(c in path for c in "*?["):
        files = sorted(p for p in _glob.glob(path) if os.path.isfile(p))
        return files if files and all(p.endswith(".parquet") for p in files) else []
    if os.path.isfile(path):
        return [path] if path.endswith(".parquet") else []
    if not os.path.isdir(path):
        return []
    files = sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(".parquet"))
    splits = sorted({m.group(1) for m in map(_SPLIT.match, map(os.path.basename, files)) if m})
    if len(splits) > 1:
        raise ValueError(
            f"{path!r} holds the Parquet files of several splits ({', '.join(splits)}): name one, such as "
            f"chute.open({os.path.join(path, splits[0] + '-*.parquet')!r})"
        )
    return files


def _column_index(pf, leaf_path: str) -> int:
    for i in range(pf.metadata.num_columns):
        if pf.schema.column(i).path == leaf_path:
            return i
    raise ValueError(f"{pf}: no leaf column {leaf_path!r}")


def _in_place(pf, column: int) -> bool:
    """Whether every chunk of the column is uncompressed, PLAIN and without a dictionary."""
    md = pf.metadata
    for r in range(md.num_row_groups):
        c = md.row_group(r).column(column)
        if c.compression != "UNCOMPRESSED" or c.has_dictionary_page or not set(c.encodings) <= _IN_PLACE:
            return False
    return True


def _chunks(pf, column: int) -> list[tuple[int, int, int]]:
    md = pf.metadata
    out = []
    for r in range(md.num_row_groups):
        c = md.row_group(r).column(column)
        first = c.dictionary_page_offset if c.has_dictionary_page else c.data_page_offset
        out.append((first, c.total_compressed_size, c.num_values))
    return out


def _decoded_copy(pf, path: str, image: str, leaf: str, cache_dir: str):
    """(the decoded copy's path, offsets, lengths, null) of the image column, made once per file version: each
    row group read by pyarrow and its values appended to ``<cache>/parquet-decoded/<key>.bin``, so that at
    most one row group is in memory."""
    st = os.stat(path)
    key = hashlib.sha256(
        f"{os.path.realpath(path)}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}\0{image}.{leaf}".encode()
    ).hexdigest()[:32]
    folder = os.path.join(cache_dir, "parquet-decoded")
    data, spans = os.path.join(folder, key + ".bin"), os.path.join(folder, key + ".npz")
    if os.path.isfile(spans) and os.path.isfile(data):
        with np.load(spans) as z:
            found = z["offsets"], z["lengths"], z["null"]
        if len(found[1]) == 0 or int((found[0] + found[1]).max()) <= os.path.getsize(data):
            return data, *found
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as e:
        raise OSError(
            f"{path}: its image column is compressed, so chute reads it from a copy decoded once into its "
            f"cache, and {folder!r} cannot be made ({e.strerror}): pass cache_dir= a writable directory"
        ) from None
    offsets, lengths, nulls, at = [], [], [], 0
    tmp = f"{data}.{os.getpid()}.tmp"
    with open(tmp, "wb") as out:
        for r in range(pf.metadata.num_row_groups):
            column = pf.read_row_group(r, columns=[image]).column(0)
            for chunk in column.chunks:
                values, start, length, null = binary_spans(chunk, leaf)
                if values is not None and not null.all():
                    first, end = int(start[~null].min()), int((start + length)[~null].max())
                    out.write(memoryview(values)[first:end])
                    start = np.where(null, 0, start - np.uint64(first) + np.uint64(at)).astype(np.uint64)
                    at += end - first
                offsets.append(start)
                lengths.append(length)
                nulls.append(null)
    found = (np.concatenate(offsets), np.concatenate(lengths), np.concatenate(nulls))
    with open(f"{spans}.{os.getpid()}.tmp", "wb") as f:
        np.savez(f, offsets=found[0], lengths=found[1], null=found[2])
    os.replace(tmp, data)
    os.replace(f"{spans}.{os.getpid()}.tmp", spans)  # last: its presence says the copy is whole
    return data, *found


class ParquetDataset(FormatDataset):
    """Parquet files (``paths``: a ``.parquet`` file, a glob, or a directory of them; samples numbered in
    the sorted order of the files), read in place.

    The image column holds the ``{"bytes", "path"}`` structs of the ``Image`` feature, or plain binary; the
    label column is a ``ClassLabel`` (its names become ``classes``) or integers: detected from the
    ``huggingface`` schema metadata and the column types, or named with ``image_key`` / ``label_key``.

    Where the image column is stored uncompressed and PLAIN-encoded (``datasets`` writes Image columns so),
    images are read by offset from the file's own mapping. Otherwise (compressed or dictionary-encoded pages)
    pyarrow decodes the column once, a row group at a time, into a copy in the cache (``cache_dir``,
    :func:`chute.cache.resolve_cache_dir`; ``decoded`` says which files needed it), reused while the file is
    unchanged: disk the size of the images, in exchange for reads by offset in any order. Each row group is a
    shard for ``order='shards'``. A null image is a sample error naming its row."""

    kind = "Parquet"

    def __init__(
        self,
        paths,
        *,
        image_key: str | None = None,
        label_key: str | None = None,
        cache_dir: str | os.PathLike | None = None,
    ):
        pq = require("pyarrow.parquet", "parquet", "Parquet files")
        if isinstance(paths, (str, bytes, os.PathLike)):
            path = os.fsdecode(_validate.path("paths", paths))
            paths = parquet_files(path) or [path]
        self.paths = [os.fsdecode(p) for p in paths]
        check_keys("a column name", image_key, label_key)
        tables, shards, found, self.decoded = [], [], None, []
        for path in self.paths:
            try:
                pf = pq.ParquetFile(path)
            except Exception as e:  # pyarrow's errors for a file that is not Parquet, or is cut short
                raise ValueError(f"{path}: not a Parquet file that pyarrow can read ({e})") from None
            schema = pf.schema_arrow
            columns = pick_columns(schema, hf_features(schema), image_key, label_key, path)
            if found is not None and columns[0] != found[0]:
                raise ValueError(f"{path}: its image column {columns[0]!r} differs from {self.paths[0]}'s {found[0]!r}")
            found = found or columns
            tables.append(self._table(pf, path, *columns[:3], cache_dir))
            shards += [pf.metadata.row_group(r).num_rows for r in range(pf.metadata.num_row_groups)]
        self.image_key, _, self.label_key, self.classes = found
        self._native = _native.open_span_table(tables, shard_sizes=[s for s in shards if s])

    def _table(self, pf, path: str, image: str, leaf: str, label: str | None, cache_dir) -> dict:
        column = _column_index(pf, f"{image}.{leaf}" if leaf else image)
        described = pf.schema.column(column)
        if described.max_repetition_level != 0:
            raise ValueError(f"{path}: the image column {image!r} is repeated (a list), not one image per row")
        paths = None
        if _in_place(pf, column):
            offsets, lengths, null = _native.scan_parquet_column(
                path,
                _chunks(pf, column),
                max_definition_level=described.max_definition_level,
                what=f"{path}: column {described.path}",
            )
            null = null.astype(bool)
            data = path
        else:
            data, offsets, lengths, null = _decoded_copy(pf, path, image, leaf, resolve_cache_dir(cache_dir))
            self.decoded.append(path)
        if null.any() and leaf:
            paths = pf.read(columns=[image]).column(0).combine_chunks()
            paths = paths.flatten()[paths.type.get_field_index("path")]
        labels = labels_of(pf.read(columns=[label]).column(0)) if label else np.full(len(offsets), -1, np.int64)
        return {
            "path": data,
            "name": path,
            "offsets": np.ascontiguousarray(offsets, np.uint64),
            "lengths": np.ascontiguousarray(lengths, np.uint64),
            "labels": labels,
            "first_key": 0,
            "bad": null_reasons(null, 0, paths),
        }

    def __repr__(self) -> str:
        return (
            f"chute.ParquetDataset({len(self.paths)} files, samples={len(self)}, image_key={self.image_key!r}, "
            f"label_key={self.label_key!r})"
        )
