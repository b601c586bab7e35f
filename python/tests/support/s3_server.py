"""An S3 endpoint on 127.0.0.1 for tests: moto's server (``moto_server``, the PyPI package ``moto[server]``).

moto is an emulator of S3's wire protocol (REST paths, ListObjectsV2 pagination, multipart uploads, error
bodies, and with ``auth=True`` SigV4 signature checks), not S3: it runs in one Python process, keeps
objects in memory, and does not reproduce S3's latency, consistency or limits. A test that passes here
shows that chute speaks the protocol; it says nothing about S3's performance.

    with MotoServer() as s3:
        s3.client().create_bucket(Bucket="data")          # boto3, independent of chute
        store = chute._native.ObjectStore(env=s3.env)        # chute, configured only through `env`

Nothing global is changed: the endpoint and credentials travel in ``s3.env`` (AWS_* variables for one
ObjectStore, with the user's profiles and files switched off), never in os.environ. Leaving the block
stops the server and waits for it to exit.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from chute.bench.loopback import free_port

_START_TIMEOUT_S = 30.0
_STOP_TIMEOUT_S = 10.0
_START_ATTEMPTS = 3  # a free port can be taken between free_port() and the server's bind

# moto accepts any key while its authentication is off.
TEST_ACCESS_KEY = "AKIAMOTOTESTKEY00000"
TEST_SECRET_KEY = "moto-test-secret-key/never+real"
REGION = "us-east-1"


def _moto_server_path() -> str:
    beside = Path(sys.executable).with_name("moto_server")
    if beside.exists():
        return str(beside)
    found = shutil.which("moto_server")
    if found is None:
        raise RuntimeError("moto_server not found: install it with `pip install 'moto[server]==5.2.5'`")
    return found


class MotoServer:
    """moto_server on 127.0.0.1:<free port>, as a context manager (see the module's docstring).

    Attributes once entered: ``endpoint`` ("http://127.0.0.1:PORT"), ``access_key``, ``secret_key``,
    ``region``, ``env`` (the variables that point an ObjectStore at it).

    ``auth=True`` turns on moto's request authentication: an IAM user with a policy allowing everything is
    created (its keys become ``access_key``/``secret_key``), then every request must carry a valid SigV4
    signature by those keys; a wrong key or secret gets S3's 403 InvalidAccessKeyId / SignatureDoesNotMatch.
    """

    def __init__(self, auth: bool = False):
        self.auth = auth
        self.endpoint = ""
        self.access_key = TEST_ACCESS_KEY
        self.secret_key = TEST_SECRET_KEY
        self.region = REGION
        self.env: dict[str, str] = {}
        self._proc: subprocess.Popen | None = None
        self._tmp: tempfile.TemporaryDirectory | None = None

    def __enter__(self) -> MotoServer:
        self._tmp = tempfile.TemporaryDirectory(prefix="chute-moto-")
        try:
            self._start()
            if self.auth:
                self._enable_auth()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        self.env = self.env_for(self.access_key, self.secret_key)
        return self

    def __exit__(self, *exc) -> None:
        self._stop()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def _stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=_STOP_TIMEOUT_S)
        elif proc is not None:
            proc.wait(timeout=_STOP_TIMEOUT_S)  # exited by itself: reap it

    def env_for(self, access_key: str, secret_key: str) -> dict[str, str]:
        """AWS_* variables for an ObjectStore that talks to this server with these keys. The user's own
        profiles, files and session token are switched off ('' unsets a variable)."""
        missing = str(Path(self._tmp.name) / "no-such-aws-file")
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ENDPOINT_URL_S3": "",
            "AWS_ACCESS_KEY_ID": access_key,
            "AWS_SECRET_ACCESS_KEY": secret_key,
            "AWS_SESSION_TOKEN": "",
            "AWS_REGION": self.region,
            "AWS_DEFAULT_REGION": "",
            "AWS_PROFILE": "",
            "AWS_SHARED_CREDENTIALS_FILE": missing,
            "AWS_CONFIG_FILE": missing,
        }

    def client(self, service: str = "s3"):
        """A boto3 client of this server (for tests to set up and check objects independently of chute)."""
        import boto3  # installed with moto; only tests use it

        session = boto3.session.Session(
            aws_access_key_id=self.access_key, aws_secret_access_key=self.secret_key, region_name=self.region
        )
        return session.client(service, endpoint_url=self.endpoint)

    def _start(self) -> None:
        log_path = Path(self._tmp.name) / "moto.log"
        for _ in range(_START_ATTEMPTS):
            port = free_port()
            with open(log_path, "ab") as log:
                # The server inherits a copy of the environment: no AWS variable of the user's is needed by
                # it, and none of ours is set globally.
                self._proc = subprocess.Popen(
                    [_moto_server_path(), "-H", "127.0.0.1", "-p", str(port)],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
            self.endpoint = f"http://127.0.0.1:{port}"
            if self._wait_ready():
                return
            self._stop()
        tail = log_path.read_text(errors="replace")[-2000:] if log_path.exists() else ""
        raise RuntimeError(f"moto_server did not start in {_START_TIMEOUT_S:.0f} s; its log ends:\n{tail}")

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + _START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(self.endpoint + "/moto-api/data.json", timeout=2.0) as r:
                    if r.status == 200:
                        return True
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.05)
        return False

    def _enable_auth(self) -> None:
        iam = self.client("iam")
        iam.create_user(UserName="chute-test")
        policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
        iam.put_user_policy(UserName="chute-test", PolicyName="all", PolicyDocument=json.dumps(policy))
        key = iam.create_access_key(UserName="chute-test")["AccessKey"]
        self.access_key, self.secret_key = key["AccessKeyId"], key["SecretAccessKey"]
        # From now on every request is authenticated (moto's documented switch, POST /moto-api/reset-auth).
        request = urllib.request.Request(
            self.endpoint + "/moto-api/reset-auth", data=b"0", method="POST", headers={"Content-Type": "text/plain"}
        )
        with urllib.request.urlopen(request, timeout=10.0) as r:
            if r.status != 200:
                raise RuntimeError(f"moto: enabling authentication answered {r.status}")
