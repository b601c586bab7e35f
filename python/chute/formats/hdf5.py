"""HDF5 files of encoded images as h5py writes them, read in place: a dataset of variable-length bytes
(``h5py.vlen_dtype(np.uint8)``), whose images lie in the file's global heap, or of fixed-length bytes
(``S<n>``, opaque ``V<n>``, NUL-padded), beside an integer labels dataset of the same length. h5py reads the
metadata (the datasets, their layout, where their stored elements are); chute's own reader finds each image
in the file (cpp/include/chute/formats/hdf5_heap.h) and reads it by offset from its mapping."""

from __future__ import annotations

import os
import zlib

import numpy as np

from chute import _native, _validate
from chute.formats.base import FormatDataset, check_keys, require

_IMAGE_NAMES = ("images", "image", "imgs", "img", "jpegs", "jpeg", "jpg", "data", "x")
_LABEL_NAMES = ("labels", "label", "targets", "target", "classes", "class", "y")
_MAGIC = b"\x89HDF\r\n\x1a\n"
_DEFLATE, _SHUFFLE = 1, 2


def is_hdf5(path: str) -> bool:
    """Whether ``path`` is an HDF5 file (its signature at byte 0; h5py files have no user block)."""
    try:
        with open(path, "rb") as f:
            return f.read(8) == _MAGIC
    except OSError:
        return False


def _kind(h5py, dset) -> str | None:
    """'vlen' or 'fixed' for a 1-D dataset of encoded images, else None."""
    if dset.ndim != 1:
        return None
    base = h5py.check_vlen_dtype(dset.dtype)
    if base is not None:
        return "vlen" if np.dtype(base) in (np.uint8, np.int8) else None
    return "fixed" if dset.dtype.kind in "SV" and dset.dtype.fields is None else None


def _datasets(f, h5py) -> dict:
    found = {}

    def visit(name, obj) -> None:  # returns None: visititems stops at the first other value
        if isinstance(obj, h5py.Dataset):
            found[name] = obj

    f.visititems(visit)
    return found


def _listing(found: dict) -> str:
    return ", ".join(f"/{n} {d.shape} {d.dtype}" for n, d in found.items()) or "none"


def _pick(f, h5py, image_key, label_key, path):
    found = _datasets(f, h5py)
    if image_key is not None:
        image = image_key.lstrip("/")
        if image not in found or _kind(h5py, found[image]) is None:
            raise ValueError(
                f"{path}: no dataset {image_key!r} of encoded images (1-D, variable-length uint8 or fixed-length "
                f"bytes) (image_key); its datasets: {_listing(found)}"
            )
    else:
        candidates = [n for n, d in found.items() if _kind(h5py, d)]
        named = [n for n in candidates if n.rsplit("/", 1)[-1].lower() in _IMAGE_NAMES]
        if len(candidates) != 1 and len(named) != 1:
            pixels = [n for n, d in found.items() if d.ndim == 4 and d.dtype == np.uint8]
            hint = (
                f"; /{pixels[0]} holds decoded pixels, not encoded images: read it as a tensor dataset"
                if pixels and not candidates
                else ""
            )
            raise ValueError(
                f"{path}: which dataset holds the encoded images? Candidates: "
                f"{', '.join('/' + c for c in candidates) or 'none'}; its datasets: {_listing(found)}{hint}. "
                "Name it with image_key="
            )
        image = candidates[0] if len(candidates) == 1 else named[0]
    n = found[image].shape[0]
    if label_key is not None:
        label = label_key.lstrip("/")
        if label not in found or found[label].shape != (n,) or found[label].dtype.kind not in "iu":
            raise ValueError(
                f"{path}: no integer dataset {label_key!r} of {n} labels (label_key); its datasets: {_listing(found)}"
            )
    else:
        integer = [m for m, d in found.items() if d.shape == (n,) and d.dtype.kind in "iu" and m != image]
        named = [m for m in integer if m.rsplit("/", 1)[-1].lower() in _LABEL_NAMES]
        label = (named or (integer if len(integer) == 1 else []) or [None])[0]
    return image, label


def _stored_elements(path: str, dset, h5py, size: int) -> bytes:
    """The vlen dataset's elements as stored (each ``size`` bytes: a length and a heap ID): its contiguous
    bytes, or its chunks' (deflate and shuffle undone; other filters refused)."""
    plist = dset.id.get_create_plist()
    layout = plist.get_layout()
    n = dset.shape[0]
    if layout == h5py.h5d.CONTIGUOUS:
        offset = dset.id.get_offset()
        if offset is None:
            return b""
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read(dset.id.get_storage_size())
    if layout != h5py.h5d.CHUNKED:
        raise ValueError(f"{path}: /{dset.name.lstrip('/')} has a compact or virtual layout: rewrite it contiguous")
    filters = [plist.get_filter(i)[0] for i in range(plist.get_nfilters())]
    if set(filters) - {_DEFLATE, _SHUFFLE}:
        raise ValueError(
            f"{path}: {dset.name}'s heap references are in chunks with filters {filters} that chute does not "
            f"undo (it undoes deflate and shuffle): rewrite them with h5repack -f {dset.name}:NONE"
        )
    per = dset.chunks[0]
    out = bytearray(n * size)
    for i in range(dset.id.get_num_chunks()):
        info = dset.id.get_chunk_info(i)
        mask, raw = dset.id.read_direct_chunk(info.chunk_offset)
        for k, fid in reversed(list(enumerate(filters))):
            if mask & (1 << k):
                continue
            if fid == _DEFLATE:
                raw = zlib.decompress(raw)
            elif fid == _SHUFFLE:
                raw = np.frombuffer(raw, np.uint8).reshape(size, -1).T.tobytes()
        first = info.chunk_offset[0]
        count = min(per, n - first)
        out[first * size : (first + count) * size] = raw[: count * size]
    return bytes(out)


def _fixed_offsets(path: str, dset, h5py) -> np.ndarray:
    plist = dset.id.get_create_plist()
    itemsize, n = dset.dtype.itemsize, dset.shape[0]
    if plist.get_layout() == h5py.h5d.CONTIGUOUS:
        offset = dset.id.get_offset()
        if offset is None:
            raise ValueError(f"{path}: {dset.name} was never written")
        return offset + np.arange(n, dtype=np.uint64) * np.uint64(itemsize)
    if plist.get_layout() != h5py.h5d.CHUNKED or plist.get_nfilters():
        raise ValueError(
            f"{path}: {dset.name} is stored in compressed chunks: its images have no place in the file to read "
            f"them from. Rewrite it uncompressed once (h5repack -f {dset.name}:NONE {path} out.h5), or store the "
            "images as variable-length bytes (h5py.vlen_dtype(np.uint8)), whose heap is never compressed"
        )
    out = np.zeros(n, np.uint64)
    per = dset.chunks[0]
    for i in range(dset.id.get_num_chunks()):
        info = dset.id.get_chunk_info(i)
        first = info.chunk_offset[0]
        count = min(per, n - first)
        out[first : first + count] = info.byte_offset + np.arange(count, dtype=np.uint64) * np.uint64(itemsize)
    return out


class HDF5Dataset(FormatDataset):
    """An HDF5 file of encoded images (JPEG, PNG, WebP) and their labels, read in place.

    The images: a 1-D dataset of variable-length bytes (``h5py.vlen_dtype(np.uint8)``), contiguous or chunked
    (its chunks hold only references into the file's global heap, where the images lie uncompressed: deflate
    and shuffle on the chunks are undone at open), or of fixed-length bytes (``S<n>`` or opaque ``V<n>``,
    each image NUL-padded, trimmed at open), contiguous or in uncompressed chunks; compressed fixed-length
    chunks are refused with what to do. The labels: a 1-D integer dataset of the same length. Both detected
    (``images``/``image``/..., ``labels``/``label``/``targets``/...; the only candidate otherwise) or named
    with ``image_key`` / ``label_key`` (paths inside the file, such as ``"train/images"``); without labels,
    -1. An empty element is a sample error naming it."""

    kind = "HDF5"

    def __init__(self, path: str | os.PathLike, *, image_key: str | None = None, label_key: str | None = None):
        h5py = require("h5py", "hdf5", "HDF5 files")
        self.path = os.fsdecode(_validate.path("path", path))
        check_keys("a dataset's path in the file", image_key, label_key)
        try:
            f = h5py.File(self.path, "r")
        except OSError as e:
            raise ValueError(f"{self.path}: not an HDF5 file that h5py can read ({e})") from None
        with f:
            try:
                image, label = _pick(f, h5py, image_key, label_key, self.path)
                dset = f[image]
                self.layout = _kind(h5py, dset)
                if self.layout == "vlen":
                    sizeof_addr, sizeof_size = f.id.get_create_plist().get_sizes()
                    stored = _stored_elements(self.path, dset, h5py, 8 + sizeof_addr)
                    offsets, lengths, bad = _native.hdf5_vlen_spans(self.path, stored, sizeof_addr, sizeof_size)
                else:
                    offsets, lengths, bad = _native.hdf5_fixed_spans(
                        self.path, _fixed_offsets(self.path, dset, h5py), dset.dtype.itemsize
                    )
                labels = np.asarray(f[label][...], np.int64) if label else np.full(len(offsets), -1, np.int64)
            except (KeyError, OSError, RuntimeError, TypeError, zlib.error) as e:  # h5py's, chute's reader's
                raise ValueError(f"{self.path}: a damaged or truncated HDF5 file ({e})") from None
        self.image_key, self.label_key, self.classes = "/" + image, ("/" + label if label else None), []
        table = {
            "path": self.path,
            "name": self.path,
            "offsets": offsets,
            "lengths": lengths,
            "labels": labels,
            "first_key": 0,
            "bad": [(i, f"{self.image_key}[{i}]: {why}") for i, why in bad],
        }
        self._native = _native.open_span_table([table], shard_sizes=[])

    def __repr__(self) -> str:
        return (
            f"chute.HDF5Dataset({self.path!r}, samples={len(self)}, image_key={self.image_key!r}, "
            f"label_key={self.label_key!r}, layout={self.layout!r})"
        )
