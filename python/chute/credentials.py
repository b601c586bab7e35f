"""S3 credentials through botocore, when it is installed (docs/REMOTE.md, "Where S3 credentials come from").

botocore knows every source a cloud job may have: environment keys, profiles, SSO, ``credential_process``,
assume-role profiles, web identity (EKS IRSA), container credentials (ECS, EKS Pod Identity) and the
instance role (IMDSv2). The process's object store (:func:`chute.remote.store`) then takes its ``s3://``
credentials from a feed (``ObjectStore.credential_feed``) that one thread of this module answers: it waits
until the store asks (at its first signed request, so a job that reads only ``https://`` never resolves
them), resolves them through botocore, pushes them, and pushes them again whenever botocore refreshes them
(botocore renews temporary credentials from 15 minutes before they expire; the thread looks every minute).
The native side never calls into Python.

Without botocore the native engine resolves the environment, profiles' keys, web identity, container
credentials and the instance role itself (chute/remote/credential_provider.h).
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import select
import threading

REFRESH_INTERVAL_S = 60.0
_EXIT_JOIN_S = 2.0

# The feeding threads and their feeds. At exit, before the interpreter finalizes, each feed is closed and
# its thread joined, so that no thread still holds a native object then (nanobind counts it leaked).
_serving: dict[threading.Thread, object] = {}
_serving_lock = threading.Lock()


def _stop_serving() -> None:
    with _serving_lock:
        serving = list(_serving.items())
    for _, feed in serving:
        feed.close()
    for thread, _ in serving:
        thread.join(timeout=_EXIT_JOIN_S)


atexit.register(_stop_serving)
os.register_at_fork(after_in_child=_serving.clear)  # the parent's threads are not in the child


def botocore_installed() -> bool:
    """Whether botocore can be imported (without importing it: most remote reads never need it)."""
    try:
        return importlib.util.find_spec("botocore") is not None
    except ValueError:  # botocore in sys.modules as None: hidden on purpose
        return False


def serve(feed, interval_s: float = REFRESH_INTERVAL_S) -> threading.Thread:
    """Starts the daemon thread that answers ``feed`` (a ``_native.CredentialFeed``) through botocore. It
    ends when the store that owns the feed is gone."""
    thread = threading.Thread(target=_serve, args=(feed, interval_s), name="chute-credentials", daemon=True)
    with _serving_lock:
        _serving[thread] = feed
    thread.start()
    return thread


def _resolve():
    """botocore's credentials (an object it refreshes itself), or None when its chain finds none."""
    import botocore.session

    # A profile variable set to '' is unset, for chute as for the native chain (botocore would look for a
    # profile named '').
    named = [name for name in ("AWS_DEFAULT_PROFILE", "AWS_PROFILE") if os.environ.get(name)]
    session = botocore.session.Session(session_vars={"profile": (None, named or None, None, None)})
    return session.get_credentials()


def _serve(feed, interval_s: float) -> None:
    try:
        _answer(feed, interval_s)
    finally:
        with _serving_lock:
            _serving.pop(threading.current_thread(), None)


def _answer(feed, interval_s: float) -> None:
    credentials = None  # botocore's, once resolved
    pushed = None  # the frozen credentials pushed last
    while True:
        # In select(), not in a native call: a daemon thread is ended where it waits when the interpreter
        # exits, which C code survives and C++ frames do not.
        select.select([feed], [], [], interval_s)
        if feed.closed:
            return
        wanted = feed.take_wanted()
        if credentials is None and not wanted:
            continue  # nothing asked yet
        try:
            if credentials is None:
                credentials = _resolve()
                if credentials is None:
                    feed.push_none("")
                    return  # none now is none for this store, as the native chain decides
            frozen = credentials.get_frozen_credentials()  # refreshed by botocore when they near expiry
        except Exception as e:  # noqa: BLE001 - any failure of botocore's chain is the requests' error
            credentials = None  # resolved again at the next ask
            feed.push_error(f"{type(e).__name__}: {e}")
            continue
        if wanted or frozen != pushed:
            feed.push(
                frozen.access_key, frozen.secret_key, frozen.token or "", None, f"botocore ({credentials.method})"
            )
            pushed = frozen
