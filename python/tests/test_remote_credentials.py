"""The credentials a cloud job has (docs/REMOTE.md, "Where S3 credentials come from"): the instance role
(IMDSv2), web identity (EKS IRSA, AssumeRoleWithWebIdentity at STS), container credentials (ECS, EKS Pod
Identity), each natively and through botocore, refreshed before they expire; and the 403 of an unsigned
request, which names every source tried. Against loopback stand-ins (aws_standins.py) for those services
and ObjectServer (object_server.py) as the bucket, which records who signed each request."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from support.aws_standins import ContainerCredentials, Issued, MetadataService, StsService
from support.object_server import ObjectServer

from chute import _native, credentials, remote

KEY = "/bkt/data.bin"
URL = "s3://bkt/data.bin"
ROLE_ARN = "arn:aws:iam::123456789012:role/trainer"


@pytest.fixture
def bucket():
    with ObjectServer(require_signature=True) as server:
        server.put(KEY, b"0123456789" * 100)
        yield server


def env_for(bucket: ObjectServer, tmp_path: Path, **extra: str) -> dict[str, str]:
    """Variables that point an ObjectStore at `bucket` with no key of its own and every other source off
    ('' unsets a variable); `extra` switches one on."""
    missing = str(tmp_path / "no-such-aws-file")
    env = {
        "AWS_ENDPOINT_URL": bucket.url,
        "AWS_ENDPOINT_URL_S3": "",
        "AWS_ENDPOINT_URL_STS": "",
        "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "",
        "AWS_SECRET_ACCESS_KEY": "",
        "AWS_SESSION_TOKEN": "",
        "AWS_PROFILE": "",
        "AWS_SHARED_CREDENTIALS_FILE": missing,
        "AWS_CONFIG_FILE": missing,
        "AWS_WEB_IDENTITY_TOKEN_FILE": "",
        "AWS_ROLE_ARN": "",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI": "",
        "AWS_CONTAINER_AUTHORIZATION_TOKEN": "",
        "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE": "",
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_EC2_METADATA_SERVICE_ENDPOINT": "",
    }
    env.update(extra)
    return env


def imds_env(imds: MetadataService) -> dict[str, str]:
    return {"AWS_EC2_METADATA_DISABLED": "", "AWS_EC2_METADATA_SERVICE_ENDPOINT": imds.url}


# ---- the native chain ----------------------------------------------------------------------------------


def test_an_instance_role_signs_requests_and_is_asked_once_while_valid(bucket, tmp_path):
    with MetadataService([Issued("ASIAIMDSONE", "imds-secret-1", "imds-token-1")]) as imds:
        store = _native.ObjectStore(env=env_for(bucket, tmp_path, **imds_env(imds)), max_retries=0)
        assert imds.requests == []  # nothing is asked before a request needs signing
        assert store.read(URL, 0, 10) == b"0123456789"
        assert store.read(URL, 10, 10) == b"0123456789"
        assert bucket.signers(KEY) == [("ASIAIMDSONE", "imds-token-1")] * 2
        (put,) = imds.seen("PUT")
        assert put[2]["x-aws-ec2-metadata-token-ttl-seconds"] == "21600"  # IMDSv2's session token
        assert imds.credential_gets() == 1  # valid for hours: not asked again
        assert "instance metadata (role chute-test-role)" in store.describe()


def test_instance_role_credentials_are_refreshed_once_expired(bucket, tmp_path):
    issued = [Issued("ASIAIMDSOLD", "s1", "t1", expires_in_s=2.0), Issued("ASIAIMDSNEW", "s2", "t2")]
    with MetadataService(issued) as imds:
        store = _native.ObjectStore(env=env_for(bucket, tmp_path, **imds_env(imds)), max_retries=0)
        store.read(URL, 0, 10)
        time.sleep(3.2)  # the first ones have expired (and a second has passed since they were fetched)
        store.read(URL, 0, 10)
        store.read(URL, 0, 10)
        assert bucket.signers(KEY) == [("ASIAIMDSOLD", "t1"), ("ASIAIMDSNEW", "t2"), ("ASIAIMDSNEW", "t2")]
        assert imds.credential_gets() == 2


def test_web_identity_is_exchanged_at_sts_with_the_current_token(bucket, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("eyJ.first-token\n")
    issued = [Issued("ASIAWEBONE", "w1", "wt1", expires_in_s=2.0), Issued("ASIAWEBTWO", "w2", "wt2")]
    with StsService(issued, {"eyJ.first-token", "eyJ.rotated-token"}) as sts:
        env = env_for(
            bucket,
            tmp_path,
            AWS_WEB_IDENTITY_TOKEN_FILE=str(token_file),
            AWS_ROLE_ARN=ROLE_ARN,
            AWS_ROLE_SESSION_NAME="trainer-7",
            AWS_ENDPOINT_URL_STS=sts.url,
        )
        store = _native.ObjectStore(env=env, max_retries=0)
        store.read(URL, 0, 10)
        token_file.write_text("eyJ.rotated-token\n")  # the kubelet rotates it
        time.sleep(3.2)
        store.read(URL, 0, 10)
        forms = sts.forms()
        assert [f["WebIdentityToken"] for f in forms] == ["eyJ.first-token", "eyJ.rotated-token"]
        assert all(f["RoleArn"] == ROLE_ARN and f["RoleSessionName"] == "trainer-7" for f in forms)
        assert all(f["Version"] == "2011-06-15" for f in forms)
        assert all("authorization" not in r[2] for r in sts.requests)  # the token is the proof: unsigned
        assert bucket.signers(KEY) == [("ASIAWEBONE", "wt1"), ("ASIAWEBTWO", "wt2")]


def test_a_refused_web_identity_is_an_error_naming_it_never_anonymous(bucket, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("eyJ.wrong-audience")
    with StsService([Issued("A", "s", "t")], {"eyJ.something-else"}) as sts:
        env = env_for(
            bucket,
            tmp_path,
            AWS_WEB_IDENTITY_TOKEN_FILE=str(token_file),
            AWS_ROLE_ARN=ROLE_ARN,
            AWS_ENDPOINT_URL_STS=sts.url,
        )
        with pytest.raises(OSError) as raised:
            _native.ObjectStore(env=env, max_retries=0).read(URL, 0, 10)
        message = str(raised.value)
        assert "web identity (role " + ROLE_ARN + ")" in message and "InvalidIdentityToken" in message, message
        assert "eyJ.wrong-audience" not in message
        assert bucket.requests == []  # nothing went out unsigned


def test_container_credentials_with_their_authorization_token(bucket, tmp_path):
    token_file = tmp_path / "eks-pod-identity-token"
    token_file.write_text("pod-identity-token\n")
    with ContainerCredentials([Issued("ASIAPODIDENTITY", "p", "pt")], "pod-identity-token") as agent:
        env = env_for(
            bucket,
            tmp_path,
            AWS_CONTAINER_CREDENTIALS_FULL_URI=agent.url + "/creds",
            AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE=str(token_file),
        )
        store = _native.ObjectStore(env=env, max_retries=0)
        assert store.read(URL, 0, 4) == b"0123"
        assert bucket.signers(KEY) == [("ASIAPODIDENTITY", "pt")]


# ---- anonymous, and its 403 ------------------------------------------------------------------------------


def test_a_403_to_an_unsigned_request_names_every_source_tried_and_how_to_set_one(bucket, tmp_path):
    with MetadataService([Issued("A", "s", "t")], role=None) as imds:  # on EC2, but no role attached
        store = _native.ObjectStore(env=env_for(bucket, tmp_path, **imds_env(imds)), max_retries=0)
        with pytest.raises(OSError) as raised:
            store.read(URL, 0, 10)
    message = str(raised.value)
    for said in (
        "s3://bkt/data.bin",
        "HTTP 403 AccessDenied",
        "the request was unsigned",
        "environment (AWS_ACCESS_KEY_ID unset)",
        "profile 'default' (no keys in",
        "web identity (AWS_WEB_IDENTITY_TOKEN_FILE unset)",
        "container credentials (AWS_CONTAINER_CREDENTIALS_RELATIVE_URI and _FULL_URI unset)",
        f"instance metadata at {imds.url} (no instance role attached)",
        "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE",
    ):
        assert said in message, f"{said!r} not in: {message}"
    assert bucket.signers(KEY) == [("", "")]


def test_anonymous_without_an_instance_metadata_service(bucket, tmp_path):
    # Nothing listens there: the service's absence costs its timeout, then requests go unsigned.
    env = env_for(
        bucket, tmp_path, AWS_EC2_METADATA_DISABLED="", AWS_EC2_METADATA_SERVICE_ENDPOINT="http://127.0.0.1:1"
    )
    with pytest.raises(OSError, match=r"instance metadata at http://127\.0\.0\.1:1 \(.*\)"):
        _native.ObjectStore(env=env, max_retries=0).read(URL, 0, 10)
    with pytest.raises(OSError, match=r"instance metadata \(AWS_EC2_METADATA_DISABLED=true\)"):
        _native.ObjectStore(env=env_for(bucket, tmp_path), max_retries=0).read(URL, 0, 10)
    public = ObjectServer()  # a public bucket: anonymous reads work
    with public:
        public.put(KEY, b"public")
        assert _native.ObjectStore(env=dict(env_for(public, tmp_path))).read(URL, 0, 6) == b"public"


def test_a_403_to_a_signed_request_names_whose_credentials_signed_it():
    from support.s3_server import MotoServer

    with MotoServer(auth=True) as s3:  # moto checks every signature
        s3.client().create_bucket(Bucket="bkt")
        wrong = _native.ObjectStore(env=s3.env_for(s3.access_key, "not-the-secret-key"), max_retries=0)
        with pytest.raises(OSError, match="signed with the credentials from environment: check them"):
            wrong.read("s3://bkt/x", 0, 1)


# ---- botocore -----------------------------------------------------------------------------------------


def test_botocore_resolves_an_instance_role_for_the_process_store(bucket, tmp_path, monkeypatch):
    pytest.importorskip("botocore")
    with MetadataService([Issued("ASIABOTOCOREIMDS", "b", "bt")]) as imds:
        for k, v in {**env_for(bucket, tmp_path), **imds_env(imds)}.items():
            monkeypatch.setenv(k, v) if v else monkeypatch.delenv(k, raising=False)
        remote.configure(max_retries=0)
        store = remote.store()
        assert store.credential_feed is not None  # botocore is installed: its chain, not the native one
        assert imds.requests == []  # nothing resolved before a request needs it
        assert store.read(URL, 0, 4) == b"0123"
        assert bucket.signers(KEY) == [("ASIABOTOCOREIMDS", "bt")]


def test_botocore_credential_process_is_refreshed_as_botocore_refreshes_it(bucket, tmp_path, monkeypatch):
    """credential_process, which the native chain does not run: each run prints the next key, expiring
    within botocore's refresh window, so botocore asks again at each look of the feed's thread."""
    pytest.importorskip("botocore")
    counter = tmp_path / "runs"
    script = tmp_path / "creds.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import datetime, json, pathlib
            p = pathlib.Path({str(counter)!r})
            n = int(p.read_text()) + 1 if p.exists() else 1
            p.write_text(str(n))
            at = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(minutes=12)
            print(json.dumps({{"Version": 1, "AccessKeyId": f"ASIAPROCESS{{n:04d}}", "SecretAccessKey": "s",
                               "SessionToken": f"pt{{n}}", "Expiration": at.strftime("%Y-%m-%dT%H:%M:%SZ")}}))
            """
        )
    )
    config = tmp_path / "config"
    config.write_text(f"[profile proc]\ncredential_process = {sys.executable} {script}\n")
    for k, v in env_for(bucket, tmp_path, AWS_CONFIG_FILE=str(config), AWS_PROFILE="proc").items():
        monkeypatch.setenv(k, v) if v else monkeypatch.delenv(k, raising=False)
    store = _native.ObjectStore(credential_feed=True, max_retries=0)
    credentials.serve(store.credential_feed, interval_s=0.2)
    store.read(URL, 0, 4)
    first = bucket.signers(KEY)[0][0]
    assert first.startswith("ASIAPROCESS")
    deadline = time.monotonic() + 60
    while bucket.signers(KEY)[-1][0] == first and time.monotonic() < deadline:
        time.sleep(0.3)
        store.read(URL, 0, 4)
    assert bucket.signers(KEY)[-1][0] != first, "botocore's refreshed credentials never reached the store"
    assert "botocore (custom-process)" in store.describe()
    del store  # the feed closes: its thread ends


def test_without_botocore_the_native_chain_serves_the_process_store(bucket, tmp_path):
    """The process's store where botocore is not installed (hidden here): no feed, the native IMDSv2."""
    with MetadataService([Issued("ASIANATIVEIMDS", "n", "nt")]) as imds:
        env = {k: v for k, v in os.environ.items()}
        for k, v in {**env_for(bucket, tmp_path), **imds_env(imds)}.items():
            if v:
                env[k] = v
            else:
                env.pop(k, None)
        code = textwrap.dedent(
            f"""
            import json, sys
            sys.modules["botocore"] = None  # as if it were not installed
            from chute import remote
            store = remote.store()
            data = store.read({URL!r}, 0, 4)
            print(json.dumps({{"feed": store.credential_feed is not None, "data": data.decode(),
                               "botocore": sys.modules.get("botocore") is not None}}))
            """
        )
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-3000:]
        assert json.loads(out.stdout.strip().splitlines()[-1]) == {"feed": False, "data": "0123", "botocore": False}
        assert bucket.signers(KEY) == [("ASIANATIVEIMDS", "nt")]
        assert imds.credential_gets() == 1


def test_a_store_that_reads_only_https_never_resolves_credentials(bucket, tmp_path, monkeypatch):
    with MetadataService([Issued("A", "s", "t")]) as imds:
        for k, v in {**env_for(bucket, tmp_path), **imds_env(imds)}.items():
            monkeypatch.setenv(k, v) if v else monkeypatch.delenv(k, raising=False)
        remote.configure()
        with ObjectServer() as site:
            site.put("/f.bin", b"hello")
            assert remote.store().read(site.url + "/f.bin", 0, 5) == b"hello"
        time.sleep(0.5)  # the credentials thread (botocore's, when installed) stays idle
        assert imds.requests == []
