"""Loopback stand-ins for the services a cloud job gets its AWS credentials from, for the tests of the
credential chain (test_remote_credentials.py):

- ``MetadataService``: EC2's instance metadata, IMDSv2 (a session token from ``PUT /latest/api/token``,
  then the role and its credentials, each GET carrying that token);
- ``StsService``: STS's ``AssumeRoleWithWebIdentity`` (EKS IRSA), answering its XML;
- ``ContainerCredentials``: the ECS / EKS Pod Identity endpoint (a GET with an Authorization token).

Each hands out the credentials it is given, in order (the last one again once they run out), with an
``Expiration`` of its choosing, and records the requests it saw. Only 127.0.0.1 is listened on.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
import urllib.parse
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler

from support.object_server import QuietServer


@dataclass
class Issued:
    access_key: str
    secret_key: str
    token: str
    expires_in_s: float = 6 * 3600.0  # from the moment they are handed out

    def expiration(self) -> str:
        at = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=self.expires_in_s)
        return at.strftime("%Y-%m-%dT%H:%M:%SZ")


class _Service:
    """A ThreadingHTTPServer on 127.0.0.1 whose subclass answers in ``answer(method, path, headers, body)``
    with (status, content type, body)."""

    def __init__(self, credentials: list[Issued]):
        self.credentials = list(credentials)
        self.requests: list[tuple[str, str, dict[str, str], bytes]] = []
        self.issued = 0  # credentials handed out
        self.lock = threading.Lock()
        self.url = ""
        self._server: QuietServer | None = None
        self._thread: threading.Thread | None = None

    def next_credentials(self) -> Issued:
        with self.lock:
            c = self.credentials[min(self.issued, len(self.credentials) - 1)]
            self.issued += 1
            return c

    def answer(self, method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, str, bytes]:
        raise NotImplementedError

    def __enter__(self):
        service = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _serve(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = {k.lower(): v for k, v in self.headers.items()}
                with service.lock:
                    service.requests.append((self.command, self.path, headers, body))
                status, content_type, out = service.answer(self.command, self.path, headers, body)
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            do_GET = do_PUT = do_POST = _serve

        self._server = QuietServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name=type(self).__name__, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=30)

    def seen(self, method: str, path_prefix: str = "") -> list[tuple[str, str, dict[str, str], bytes]]:
        with self.lock:
            return [r for r in self.requests if r[0] == method and r[1].startswith(path_prefix)]


def _credentials_json(c: Issued) -> bytes:
    return json.dumps(
        {
            "Code": "Success",
            "LastUpdated": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "Type": "AWS-HMAC",
            "AccessKeyId": c.access_key,
            "SecretAccessKey": c.secret_key,
            "Token": c.token,
            "Expiration": c.expiration(),
        }
    ).encode()


class MetadataService(_Service):
    """IMDSv2. ``role=None``: no instance role attached (the role listing answers 404)."""

    TOKEN = "imds-session-token-0123456789"
    ROLE_PATH = "/latest/meta-data/iam/security-credentials/"

    def __init__(self, credentials: list[Issued], role: str | None = "chute-test-role"):
        super().__init__(credentials)
        self.role = role

    def answer(self, method, path, headers, body):
        if method == "PUT" and path == "/latest/api/token":
            if "x-aws-ec2-metadata-token-ttl-seconds" not in headers:
                return 400, "text/plain", b"missing x-aws-ec2-metadata-token-ttl-seconds"
            return 200, "text/plain", self.TOKEN.encode()
        if headers.get("x-aws-ec2-metadata-token") != self.TOKEN:
            return 401, "text/plain", b"IMDSv2: a session token is required"
        if method == "GET" and path == self.ROLE_PATH:
            return (404, "text/plain", b"") if self.role is None else (200, "text/plain", self.role.encode())
        if method == "GET" and self.role is not None and path == self.ROLE_PATH + self.role:
            return 200, "application/json", _credentials_json(self.next_credentials())
        return 404, "text/plain", b""

    def credential_gets(self) -> int:
        return len(self.seen("GET", self.ROLE_PATH + (self.role or "?")))


class StsService(_Service):
    """AssumeRoleWithWebIdentity: answers when the form's WebIdentityToken is one of ``valid_tokens``,
    else STS's 400 InvalidIdentityToken."""

    def __init__(self, credentials: list[Issued], valid_tokens: set[str]):
        super().__init__(credentials)
        self.valid_tokens = valid_tokens

    def forms(self) -> list[dict[str, str]]:
        return [dict(urllib.parse.parse_qsl(r[3].decode())) for r in self.seen("POST")]

    def answer(self, method, path, headers, body):
        form = dict(urllib.parse.parse_qsl(body.decode()))
        if method != "POST" or form.get("Action") != "AssumeRoleWithWebIdentity":
            return 400, "text/xml", b"<ErrorResponse><Error><Code>InvalidAction</Code></Error></ErrorResponse>"
        if form.get("WebIdentityToken") not in self.valid_tokens:
            return (
                400,
                "text/xml",
                b"<ErrorResponse><Error><Type>Sender</Type><Code>InvalidIdentityToken</Code>"
                b"<Message>Incorrect token audience</Message></Error></ErrorResponse>",
            )
        c = self.next_credentials()
        xml = f"""<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <AssumeRoleWithWebIdentityResult>
    <SubjectFromWebIdentityToken>system:serviceaccount:ml:trainer</SubjectFromWebIdentityToken>
    <AssumedRoleUser><Arn>{form.get("RoleArn")}/{form.get("RoleSessionName")}</Arn></AssumedRoleUser>
    <Credentials>
      <AccessKeyId>{c.access_key}</AccessKeyId>
      <SecretAccessKey>{c.secret_key}</SecretAccessKey>
      <SessionToken>{c.token}</SessionToken>
      <Expiration>{c.expiration()}</Expiration>
    </Credentials>
  </AssumeRoleWithWebIdentityResult>
  <ResponseMetadata><RequestId>chute-test</RequestId></ResponseMetadata>
</AssumeRoleWithWebIdentityResponse>"""
        return 200, "text/xml", xml.encode()


class ContainerCredentials(_Service):
    """The container credentials endpoint at ``/creds``, requiring ``Authorization: <authorization>``."""

    def __init__(self, credentials: list[Issued], authorization: str):
        super().__init__(credentials)
        self.authorization = authorization

    def answer(self, method, path, headers, body):
        if path != "/creds":
            return 404, "text/plain", b""
        if headers.get("authorization") != self.authorization:
            return 401, "application/json", b'{"message": "bad token"}'
        return 200, "application/json", _credentials_json(self.next_credentials())
