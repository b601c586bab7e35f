"""One version per object: the parallel ranges of one download all come from one version of the object
(If-Match on its ETag, and every answer's ETag checked), so an object replaced while it is read is never
kept as a mix of both, nor cached under the other version's key. Against ObjectServer (object_server.py),
which replaces an object between the first range of a download and the others, over http:// and s3://."""

from __future__ import annotations

import io
import os
import tarfile

import pytest
from support.object_server import ObjectServer

import chute
from chute import _native, remote
from chute.errors import ResourceError

MiB = 1 << 20
FAST = {"backoff_base_s": 0.001, "backoff_max_s": 0.01}


def versions(size: int) -> tuple[bytes, bytes]:
    """Two versions of one object, the same size, different everywhere."""
    one = os.urandom(size)
    return one, bytes(b ^ 0xFF for b in one)


def read_object(engine, into: str, url: str, size: int, tmp_path, **kwargs) -> bytes:
    """The object through HttpEngine.download (into a file) or HttpEngine.receive (into memory, in place)."""
    if into == "memory":
        return engine.receive(url, size, **kwargs)
    engine.download(url, size, str(tmp_path / "x.bin"), **kwargs)
    return (tmp_path / "x.bin").read_bytes()


@pytest.mark.parametrize("into", ["file", "memory"])
def test_a_download_reads_one_version_when_the_object_changes_between_ranges(tmp_path, into):
    v1, v2 = versions(3 * MiB + 5)
    with ObjectServer() as server:
        server.put("/x.bin", v1)
        server.replace_after_first_range("/x.bin", v2)
        data = read_object(_native.HttpEngine(**FAST), into, server.url + "/x.bin", len(v1), tmp_path, chunk_bytes=MiB)
        assert data == v2, "a mix of versions" if data not in (v1, v2) else "the old version"
        # The first pass met the change; the object was read again from the start.
        assert len([r for r in server.requests_for("/x.bin") if r[2].get("range", "").startswith("bytes=0-")]) == 2


def test_a_download_returns_the_etag_it_read(tmp_path):
    v1, v2 = versions(2 * MiB)
    with ObjectServer() as server:
        server.put("/x.bin", v1)
        server.replace_after_first_range("/x.bin", v2)
        etag = _native.HttpEngine(**FAST).download(server.url + "/x.bin", len(v1), str(tmp_path / "x"), chunk_bytes=MiB)
        assert etag == server.etag("/x.bin").strip('"')


@pytest.mark.parametrize("into", ["file", "memory"])
@pytest.mark.parametrize("honour_if_match", [True, False], ids=["412", "etag-compared"])
def test_a_download_pinned_to_the_listed_etag_fails_naming_the_change(tmp_path, honour_if_match, into):
    v1, v2 = versions(3 * MiB)
    with ObjectServer(honour_if_match=honour_if_match) as server:
        listed = server.put("/x.bin", v1).strip('"')
        server.replace_after_first_range("/x.bin", v2)
        with pytest.raises(OSError, match="changed since it was listed") as raised:
            read_object(
                _native.HttpEngine(**FAST), into, server.url + "/x.bin", len(v1), tmp_path, chunk_bytes=MiB, etag=listed
            )
        assert "/x.bin" in str(raised.value)
        # Every range carried If-Match on the listed version, from the first.
        gets = server.requests_for("/x.bin", "GET")
        assert gets and all(r[2].get("if-match") == f'"{listed}"' for r in gets)


def test_an_object_that_keeps_changing_fails_after_the_retry_budget(tmp_path):
    size = 2 * MiB
    with ObjectServer() as server:
        server.put("/x.bin", os.urandom(size))
        server.churn("/x.bin")  # a new version after every range
        with pytest.raises(ResourceError, match=r"changed while it was read, 3 times .*never kept"):
            _native.HttpEngine(max_retries=2, **FAST).download(
                server.url + "/x.bin", size, str(tmp_path / "x"), chunk_bytes=MiB
            )


def make_tar(label: int, members: int = 320, member_bytes: int = 70_000) -> bytes:
    """A WebDataset tar: `members` samples whose .cls says `label` (22 MB by default, as in the issue)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for i in range(members):
            for name, data in ((f"s{i:04d}.jpg", os.urandom(member_bytes)), (f"s{i:04d}.cls", str(label).encode())):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def labels_of(dataset) -> set[int]:
    return {dataset[i][1] for i in range(len(dataset))}


@pytest.mark.parametrize("scheme", ["http", "s3"])
def test_a_tar_replaced_during_its_fetch_is_cached_whole_under_its_own_etag(tmp_path, monkeypatch, capfd, scheme):
    """The issue's run: a 22 MB tar overwritten while chute.open fetched it came back with labels of both
    versions, cached under the first version's ETag."""
    v1, v2 = make_tar(1), make_tar(2)
    assert len(v1) == len(v2) > 16 * MiB  # three ranges of 8 MiB
    cache_dir = tmp_path / "cache"
    with ObjectServer() as server:
        server.put("/bkt/train.tar", v1)
        server.replace_after_first_range("/bkt/train.tar", v2)
        if scheme == "s3":
            monkeypatch.setenv("AWS_ENDPOINT_URL", server.url)
            monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAVERSIONTEST00000")
            monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
            url = "s3://bkt/train.tar"
        else:
            url = server.url + "/bkt/train.tar"
        remote.configure()
        dataset = chute.open(url, cache_dir=cache_dir)
        assert labels_of(dataset) == {2}
        entries = _native.ShardCache(cache_dir / "shards").list()
        (entry,) = [e for e in entries if "train.tar" in e["key"]]
        assert server.etag("/bkt/train.tar").strip('"') in entry["key"]
        with open(entry["path"], "rb") as f:
            assert f.read()[: len(v2)] == v2  # then the entry's trailer (its checksum: shard_cache.h)
        assert not [f for f in os.listdir(cache_dir / "shards") if f.endswith(".tmp")]
        # The first download was pinned to the listed version from its first range (If-Match), met the
        # change, and the object was listed again: HEADs by the pattern's expansion and after the change.
        heads = server.requests_for("/bkt/train.tar", "HEAD")
        assert len(heads) == 2
        first_pass = server.requests_for("/bkt/train.tar", "GET")[:3]
        assert all(r[2].get("if-match", "").startswith('"v1-') for r in first_pass)
        # The index learned while it streamed is of the version that arrived, named by it: a second open
        # finds it (it streams nothing to count samples) and reads v2's labels.
        capfd.readouterr()
        again = chute.open(url, cache_dir=cache_dir)
        assert "have no index" not in capfd.readouterr().err
        assert labels_of(again) == {2}
