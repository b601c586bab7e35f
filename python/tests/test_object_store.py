"""chute's ObjectStore (chute/object_store.h) against moto's S3 emulator on loopback, with moto's SigV4
authentication on: every request chute sends must carry a signature moto recomputes and accepts. boto3
sets up and checks objects independently of chute. moto emulates S3's wire protocol; it is not S3."""

from __future__ import annotations

import gc
import os

import numpy as np
import pytest

from chute import _native

pytest.importorskip("moto")
pytest.importorskip("boto3")

from support.fault_proxy import FaultProxy  # noqa: E402
from support.s3_server import MotoServer  # noqa: E402

from chute.bench.loopback import NGINX, Nginx  # noqa: E402

MiB = 1 << 20


@pytest.fixture(scope="module")
def s3():
    with MotoServer(auth=True) as server:
        server.client().create_bucket(Bucket="bkt")
        yield server


@pytest.fixture(scope="module")
def store(s3):
    return _native.ObjectStore(env=s3.env)


def payload(n: int, seed: int) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def put_objects(s3, keys, size=64):
    client = s3.client()
    for i, key in enumerate(keys):
        client.put_object(Bucket="bkt", Key=key, Body=payload(size + i, i))


def pending_uploads(s3, prefix):
    return s3.client().list_multipart_uploads(Bucket="bkt", Prefix=prefix).get("Uploads", [])


def exists(s3, key) -> bool:
    from botocore.exceptions import ClientError

    try:
        s3.client().head_object(Bucket="bkt", Key=key)
        return True
    except ClientError as e:
        if e.response["Error"]["Code"] in ("404", "NoSuchKey"):
            return False
        raise


def urls(infos):
    return [i.url for i in infos]


def test_expand_braces_globs_and_prefixes(s3, store):
    keys = [f"exp/train-{i:04d}.tar" for i in range(6)] + ["exp/val-0000.tar", "exp/sub/deep.tar", "exp/notes.txt"]
    put_objects(s3, keys)
    got = store.expand("s3://bkt/exp/train-{0000..0002}.tar")
    assert urls(got) == [f"s3://bkt/exp/train-{i:04d}.tar" for i in range(3)]
    assert [i.size for i in got] == [64, 65, 66]
    # '*' does not cross '/': exp/sub/deep.tar is not under exp/*.tar.
    assert urls(store.expand("s3://bkt/exp/*.tar")) == sorted(
        f"s3://bkt/{k}" for k in keys if k.endswith(".tar") and k.count("/") == 1
    )
    assert urls(store.expand("s3://bkt/exp/{train,val}-000[0-1].tar")) == [
        "s3://bkt/exp/train-0000.tar",
        "s3://bkt/exp/train-0001.tar",
        "s3://bkt/exp/val-0000.tar",
    ]
    assert urls(store.expand("s3://bkt/exp/*/*.tar")) == ["s3://bkt/exp/sub/deep.tar"]
    assert urls(store.expand("s3://bkt/exp/?al-*")) == ["s3://bkt/exp/val-0000.tar"]
    # A prefix ending in '/' is everything under it, sorted by key.
    assert urls(store.expand("s3://bkt/exp/")) == sorted(f"s3://bkt/{k}" for k in keys)


def test_many_brace_names_in_one_directory_take_one_listing(s3):
    keys = [f"dir40/s-{i:03d}.bin" for i in range(40)] + ["dir40/other.txt", "dir40/sub/s-000.bin"]
    put_objects(s3, keys)
    with FaultProxy(s3.endpoint) as proxy:
        store = _native.ObjectStore(env=dict(s3.env, AWS_ENDPOINT_URL=proxy.url))
        got = store.expand("s3://bkt/dir40/s-{000..039}.bin")
        assert [(r.method, "list-type=2" in r.path) for r in proxy.requests] == [("GET", True)]  # no HEAD
    assert [(i.url, i.size) for i in got] == [(f"s3://bkt/{k}", 64 + n) for n, k in enumerate(keys[:40])]


def test_names_thin_in_a_large_directory_fall_back_to_heads(s3):
    # 16 names whose common prefix ("thin/k-00") also holds 1100 other keys: the listing passes its bound
    # (4 * 16 + 1000 keys) on its second page of 1000, so the names are HEADed instead.
    from concurrent.futures import ThreadPoolExecutor

    client = s3.client()
    names = [f"thin/k-{i:04d}" for i in range(16)]
    others = [f"thin/k-00zz-{i:04d}" for i in range(1100)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda k: client.put_object(Bucket="bkt", Key=k, Body=b"x"), names + others))
    with FaultProxy(s3.endpoint) as proxy:
        store = _native.ObjectStore(env=dict(s3.env, AWS_ENDPOINT_URL=proxy.url))
        got = store.expand("s3://bkt/thin/k-{0000..0015}")
        methods = [r.method for r in proxy.requests]
    assert urls(got) == [f"s3://bkt/{k}" for k in names]
    assert methods.count("GET") == 2 and methods.count("HEAD") == 16


def test_brace_names_agree_with_head_object(s3, store):
    keys = [f"many/s-{i:03d}.bin" for i in range(40)]
    put_objects(s3, keys)
    got = store.expand("s3://bkt/many/s-{000..039}.bin")  # one listing of many/s-0
    assert [(i.url, i.size) for i in got] == [(f"s3://bkt/{k}", 64 + n) for n, k in enumerate(keys)]
    heads = [s3.client().head_object(Bucket="bkt", Key=k)["ETag"].strip('"') for k in keys]
    assert [i.etag for i in got] == heads
    with pytest.raises(FileNotFoundError, match="s3://bkt/many/s-040.bin: no such object"):
        store.expand("s3://bkt/many/s-{000..040}.bin")
    with pytest.raises(FileNotFoundError, match="s3://bkt/many/s-040.bin.*404"):  # a few names: HEADs
        store.expand("s3://bkt/many/s-{038..040}.bin")


def test_listing_follows_continuation_tokens(s3):
    keys = [f"page/k-{i:03d}" for i in range(53)]
    put_objects(s3, keys, size=1)
    # 53 keys in pages of 7: eight ListObjectsV2 requests, each after the previous page's token.
    small_pages = _native.ObjectStore(env=s3.env, list_max_keys=7)
    expected = sorted(f"s3://bkt/{k}" for k in keys)
    assert urls(small_pages.expand("s3://bkt/page/")) == expected
    assert urls(small_pages.expand("s3://bkt/page/k-00*")) == expected[:10]
    # Independently of chute: boto3's own paginated listing agrees.
    listed = []
    for page in (
        s3.client()
        .get_paginator("list_objects_v2")
        .paginate(Bucket="bkt", Prefix="page/", PaginationConfig={"PageSize": 10})
    ):
        listed += [f"s3://bkt/{o['Key']}" for o in page["Contents"]]
    assert listed == expected


def test_stat_matches_head_object(s3, store):
    data = payload(12345, 1)
    s3.client().put_object(Bucket="bkt", Key="stat/x.bin", Body=data)
    info = store.stat("s3://bkt/stat/x.bin")
    head = s3.client().head_object(Bucket="bkt", Key="stat/x.bin")
    assert (info.url, info.size) == ("s3://bkt/stat/x.bin", 12345)
    assert info.etag == head["ETag"].strip('"')


def test_ranged_reads_are_byte_exact(s3, store):
    data = payload(3 * MiB + 17, 2)
    s3.client().put_object(Bucket="bkt", Key="read/blob", Body=data)
    for offset, length in [(0, 1), (0, 1000), (MiB - 3, 10), (len(data) - 1, 1), (5, len(data) - 5)]:
        assert store.read("s3://bkt/read/blob", offset, length) == data[offset : offset + length]
    assert store.read("s3://bkt/read/blob", 10, 0) == b""


def test_download_is_byte_exact(s3, store, tmp_path):
    data = payload(20 * MiB + 5, 3)  # three 8 MiB ranged GETs, the last one short
    s3.client().put_object(Bucket="bkt", Key="dl/big.bin", Body=data)
    info = store.download("s3://bkt/dl/big.bin", tmp_path / "big.bin")
    assert info.size == len(data)
    assert (tmp_path / "big.bin").read_bytes() == data


def test_put_is_one_object(s3, store):
    data = payload(1000, 4)
    store.put("s3://bkt/put/one.bin", data)
    assert s3.client().get_object(Bucket="bkt", Key="put/one.bin")["Body"].read() == data


def test_keys_with_reserved_and_unicode_characters(s3, store):
    # Every byte class SigV4's canonical encoding treats specially; moto recomputes each signature.
    key = "odd/a b+c=d&e;f,g'h(1)~!@$.tar"
    unicode_key = "odd/caf\u00e9/\u00fcber.tar"
    put_objects(s3, [key, unicode_key])
    assert store.stat(f"s3://bkt/{key}").size == 64
    assert store.read(f"s3://bkt/{unicode_key}", 0, 65) == payload(65, 1)
    assert urls(store.expand("s3://bkt/odd/")) == sorted([f"s3://bkt/{key}", f"s3://bkt/{unicode_key}"])
    assert urls(store.expand("s3://bkt/odd/a b+*")) == [f"s3://bkt/{key}"]


def test_multipart_upload_is_atomic(s3, store):
    data = payload(20 * MiB + 123, 5)
    upload = store.begin_upload("s3://bkt/mp/atomic.bin")
    for start in range(0, len(data), 3 * MiB + 1):  # writes that do not line up with parts
        upload.write(data[start : start + 3 * MiB + 1])
    assert upload.bytes_written == len(data)
    # Parts are uploaded (two full 8 MiB parts so far), yet no object is visible.
    assert len(pending_uploads(s3, "mp/atomic.bin")) == 1
    assert not exists(s3, "mp/atomic.bin")
    upload.commit()
    assert s3.client().get_object(Bucket="bkt", Key="mp/atomic.bin")["Body"].read() == data
    assert pending_uploads(s3, "mp/atomic.bin") == []
    with pytest.raises(ValueError, match="after commit"):
        upload.write(b"x")


def test_parts_in_flight_together_complete_in_order(s3):
    # 5 MiB parts (S3's minimum), up to four uploading at once: seven parts that must be listed in order.
    small_parts = _native.ObjectStore(env=s3.env, part_bytes=5 * MiB)
    data = payload(31 * MiB + 1, 10)
    with small_parts.begin_upload("s3://bkt/mp/seven.bin") as upload:
        upload.write(data)
    assert s3.client().get_object(Bucket="bkt", Key="mp/seven.bin")["Body"].read() == data
    assert s3.client().head_object(Bucket="bkt", Key="mp/seven.bin")["ETag"].endswith('-7"')


def test_abort_leaves_nothing(s3, store):
    upload = store.begin_upload("s3://bkt/mp/aborted.bin")
    upload.write(payload(17 * MiB, 6))
    assert len(pending_uploads(s3, "mp/aborted.bin")) == 1
    upload.abort()
    upload.abort()  # idempotent
    assert pending_uploads(s3, "mp/aborted.bin") == []
    assert not exists(s3, "mp/aborted.bin")


def test_an_upload_dropped_without_commit_is_aborted(s3, store):
    upload = store.begin_upload("s3://bkt/mp/dropped.bin")
    upload.write(payload(9 * MiB, 7))
    assert len(pending_uploads(s3, "mp/dropped.bin")) == 1
    del upload
    gc.collect()
    assert pending_uploads(s3, "mp/dropped.bin") == []
    assert not exists(s3, "mp/dropped.bin")


def test_a_with_block_commits_or_aborts(s3, store):
    small = payload(1000, 8)
    with store.begin_upload("s3://bkt/mp/small.bin") as upload:
        upload.write(small)
        assert not exists(s3, "mp/small.bin")  # smaller than a part: one PUT, at commit
    assert s3.client().get_object(Bucket="bkt", Key="mp/small.bin")["Body"].read() == small
    with pytest.raises(RuntimeError, match="boom"):
        with store.begin_upload("s3://bkt/mp/failed.bin") as upload:
            upload.write(payload(9 * MiB, 9))
            raise RuntimeError("boom")
    assert pending_uploads(s3, "mp/failed.bin") == []
    assert not exists(s3, "mp/failed.bin")


def test_wrong_credentials_are_a_clear_error_without_the_secret(s3):
    put_objects(s3, ["cred/x"])
    wrong_secret = "wrong-secret-DO-NOT-PRINT-123"
    bad = _native.ObjectStore(env=s3.env_for(s3.access_key, wrong_secret), max_retries=0)
    with pytest.raises(OSError) as e:
        bad.read("s3://bkt/cred/x", 0, 4)
    message = str(e.value)
    assert "s3://bkt/cred/x" in message and "403" in message and "SignatureDoesNotMatch" in message
    assert wrong_secret not in message and s3.secret_key not in message
    unknown = _native.ObjectStore(env=s3.env_for("AKIANOSUCHKEY0000000", wrong_secret), max_retries=0)
    with pytest.raises(OSError, match="InvalidAccessKeyId") as e:
        unknown.expand("s3://bkt/cred/*")
    assert wrong_secret not in str(e.value)
    assert wrong_secret not in bad.describe() and "AKIA..." in unknown.describe()


def test_missing_objects_and_buckets_name_the_url(store):
    with pytest.raises(FileNotFoundError, match="s3://bkt/no/such-key"):
        store.stat("s3://bkt/no/such-key")
    with pytest.raises(FileNotFoundError, match="s3://bkt/no/such-key.*404"):
        store.read("s3://bkt/no/such-key", 0, 1)
    with pytest.raises(FileNotFoundError, match="s3://no-such-bucket/.*NoSuchBucket"):
        store.expand("s3://no-such-bucket/x-*")
    with pytest.raises(FileNotFoundError, match=r"no object matches 's3://bkt/none/\*\.tar'"):
        store.expand("s3://bkt/none/*.tar")


def test_bad_patterns_and_urls_are_value_errors(store):
    with pytest.raises(ValueError, match=r"'s3://bkt/x-\{0\.\.3'.*never closed"):
        store.expand("s3://bkt/x-{0..3")
    with pytest.raises(ValueError, match="more than 1000000 names"):
        store.expand("s3://bkt/x-{0..9999999}")
    with pytest.raises(ValueError, match=r"\[.*never closed"):
        store.expand("s3://bkt/x-[0-9")
    with pytest.raises(ValueError, match="braces only"):
        store.expand("http://127.0.0.1:1/data/*.tar")
    with pytest.raises(ValueError, match="unknown scheme 'ftp'"):
        store.stat("ftp://host/x")
    with pytest.raises(ValueError, match="not http"):
        store.begin_upload("http://127.0.0.1:1/x")


def test_configuration_errors_surface_on_s3_use_only(tmp_path):
    local = tmp_path / "f.bin"
    local.write_bytes(b"abc")
    store = _native.ObjectStore(env={"AWS_PROFILE": "no-such-profile", "AWS_CONFIG_FILE": str(tmp_path / "none")})
    assert store.read(str(local), 0, 3) == b"abc"  # local paths keep working
    with pytest.raises(ValueError, match="no-such-profile"):
        store.stat("s3://bkt/x")


def test_local_paths(tmp_path):
    store = _native.ObjectStore(env={})
    (tmp_path / "d" / "sub").mkdir(parents=True)
    for name in ["a-0.tar", "a-1.tar", "b-0.tar", "sub/a-9.tar"]:
        (tmp_path / "d" / name).write_bytes(name.encode())
    root = str(tmp_path / "d")
    assert urls(store.expand(root + "/a-*.tar")) == [root + "/a-0.tar", root + "/a-1.tar"]
    assert urls(store.expand(root + "/{a,b}-0.tar")) == [root + "/a-0.tar", root + "/b-0.tar"]
    assert urls(store.expand("file://" + root + "/*/a-?.tar")) == [root + "/sub/a-9.tar"]
    assert urls(store.expand(root + "/")) == sorted(
        root + "/" + n for n in ["a-0.tar", "a-1.tar", "b-0.tar", "sub/a-9.tar"]
    )
    assert store.stat("file://" + root + "/b-0.tar").size == 7
    assert store.read(root + "/sub/a-9.tar", 4, 3) == b"a-9"
    with pytest.raises(OSError, match="past the end"):
        store.read(root + "/a-0.tar", 5, 10)
    with pytest.raises(FileNotFoundError):
        store.stat(root + "/missing")
    with pytest.raises(FileNotFoundError, match="no object matches"):
        store.expand(root + "/z-*")
    info = store.download(root + "/a-1.tar", tmp_path / "copy")
    assert info.size == 7 and (tmp_path / "copy").read_bytes() == b"a-1.tar"
    store.put(str(tmp_path / "out.bin"), b"xyz")
    assert (tmp_path / "out.bin").read_bytes() == b"xyz"
    upload = store.begin_upload(str(tmp_path / "atomic.bin"))
    upload.write(b"part")
    assert not (tmp_path / "atomic.bin").exists()
    upload.commit()
    assert (tmp_path / "atomic.bin").read_bytes() == b"part"
    dropped = store.begin_upload(str(tmp_path / "dropped.bin"))
    dropped.write(b"x")
    del dropped
    gc.collect()
    assert sorted(os.listdir(tmp_path)) == ["atomic.bin", "copy", "d", "out.bin"]  # no temporary left


def test_sigv4_authorization_is_sent(s3):
    put_objects(s3, ["sig/x"])
    with FaultProxy(s3.endpoint) as proxy:
        env = dict(s3.env, AWS_ENDPOINT_URL=proxy.url)
        _native.ObjectStore(env=env).read("s3://bkt/sig/x", 0, 4)
        headers = {k.lower(): v for k, v in proxy.requests[-1].headers.items()}
    assert headers["authorization"].startswith(f"AWS4-HMAC-SHA256 Credential={s3.access_key}/")
    assert "SignedHeaders=" in headers["authorization"] and "x-amz-date" in headers
    assert headers["x-amz-content-sha256"] == "UNSIGNED-PAYLOAD"
    assert s3.secret_key not in str(proxy.requests)


def test_url_helpers():
    assert _native.is_remote("s3://b/k") and _native.is_remote("https://h/x") and _native.is_remote("gs://b/k")
    assert not _native.is_remote("/data/x") and not _native.is_remote("file:///data/x")
    assert _native.join_url("s3://b/prefix", "index.chidx") == "s3://b/prefix/index.chidx"
    assert _native.join_url("s3://b/prefix/", "index.chidx") == "s3://b/prefix/index.chidx"


def test_http_urls_take_braces_and_keep_tokens_out_of_messages(tmp_path):
    if not os.path.exists(NGINX):
        pytest.skip("nginx is not installed (scripts/setup.sh --dev installs nginx-light)")
    shards = {f"shard-{i}.tar": payload(1000 + i, 20 + i) for i in range(3)}
    for name, data in shards.items():
        (tmp_path / name).write_bytes(data)
    store = _native.ObjectStore(env={})
    with Nginx(tmp_path) as base:
        got = store.expand(base + "/shard-{0..2}.tar")
        assert [(i.url, i.size) for i in got] == [(f"{base}/{n}", len(d)) for n, d in shards.items()]
        out = tmp_path / "copy"
        store.download(base + "/shard-1.tar", out)
        assert out.read_bytes() == shards["shard-1.tar"]
        assert store.read(base + "/shard-2.tar", 10, 20) == shards["shard-2.tar"][10:30]
        with pytest.raises(ValueError, match="braces only"):
            store.expand(base + "/shard-*.tar")
        with pytest.raises(ValueError, match="cannot be listed"):
            store.expand(base + "/")
        with pytest.raises(FileNotFoundError, match="shard-9.tar") as e:
            store.expand(base + "/shard-{0,9}.tar?X-Amz-Signature=SECRETSIGNATURE")
        assert "SECRETSIGNATURE" not in str(e.value)


def test_listing_and_multipart_survive_resets_and_slowdowns(s3):
    # Requests answered 503 SlowDown or dropped (RST) before they reach moto are retried by the engine:
    # every listed key once, and a multipart upload whose parts and calls were retried is byte-exact.
    keys = [f"faults/k-{i:03d}" for i in range(30)]
    put_objects(s3, keys, size=1)
    data = payload(13 * MiB, 11)
    with FaultProxy(s3.endpoint, reset_every=4, status_every=(3, 503)) as proxy:
        env = dict(s3.env, AWS_ENDPOINT_URL=proxy.url)
        store = _native.ObjectStore(env=env, list_max_keys=4, part_bytes=5 * MiB, max_retries=20)
        assert urls(store.expand("s3://bkt/faults/")) == sorted(f"s3://bkt/{k}" for k in keys)
        with store.begin_upload("s3://bkt/faults/mp.bin") as upload:
            upload.write(data)
        assert proxy.faults.resets > 0 and proxy.faults.statuses > 0
    assert s3.client().get_object(Bucket="bkt", Key="faults/mp.bin")["Body"].read() == data


def test_moto_server_is_stopped_and_reaped():
    with MotoServer() as server:
        proc = server._proc
        assert proc.poll() is None
        assert server.env["AWS_ENDPOINT_URL"] == server.endpoint and server.env["AWS_PROFILE"] == ""
        assert "AWS_ENDPOINT_URL" not in os.environ or os.environ["AWS_ENDPOINT_URL"] != server.endpoint
    assert proc.returncode is not None  # waited for: no zombie left


def test_a_complete_whose_answer_was_lost_is_retried(s3):
    # Requests through the proxy, one at a time: 1 create, 2 part 1, 3 part 2, 4 complete. The answer to
    # the complete is cut off after moto completed the upload; the engine sends it again and moto answers
    # the repeated complete with success, so the object is there once, whole.
    data = payload(6 * MiB, 12)
    with FaultProxy(s3.endpoint, truncate_every=4) as proxy:
        env = dict(s3.env, AWS_ENDPOINT_URL=proxy.url)
        store = _native.ObjectStore(env=env, part_bytes=5 * MiB, parts_in_flight=1)
        with store.begin_upload("s3://bkt/lost/complete.bin") as upload:
            upload.write(data)
        assert proxy.faults.truncations == 1
        assert [r.method for r in proxy.requests] == ["POST", "PUT", "PUT", "POST", "POST"]
    assert s3.client().get_object(Bucket="bkt", Key="lost/complete.bin")["Body"].read() == data
    assert pending_uploads(s3, "lost/") == []
