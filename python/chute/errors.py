"""The exceptions chute raises: a bad sample (SampleError), and the machine failing (ResourceError)."""


class SampleError(RuntimeError):
    """A sample that could not be loaded: which one, where it lives, and why.

    Attributes: ``index`` (in the source), ``path``, ``reason``, ``epoch``.
    """

    def __init__(self, index: int, path: str, reason: str, epoch: int = 0):
        super().__init__(f"sample {index} ({path}): {reason}")
        self.index = index
        self.path = path
        self.reason = reason
        self.epoch = epoch

    def __reduce__(self):
        return type(self), (self.index, self.path, self.reason, self.epoch)


class ResourceError(OSError, RuntimeError):
    """The machine, not the data: out of file descriptors (``ulimit -n``), memory, threads, or a storage
    failure (EIO, a stale or timed-out network mount) that outlasted chute's retries with backoff. The
    message names the sample being read when it happened and the limit to raise.

    Never skipped by ``on_error='skip'`` and never written to the quarantine file: the sample is not at
    fault. An ``OSError`` (as the failing system call's error is) and a ``RuntimeError`` (as other
    engine failures are), so handlers written for either catch it."""


class Quarantine:
    """An append-only list of bad samples in a file: one JSON object per line, ``{"index", "path",
    "reason", "epoch"}``, each sample once (the first time it fails), written and flushed as the loader
    reports the failure, so the list survives a crash of the job. The file is opened for each line, so
    no descriptor stays open. The file is opened (and created) once at construction, so an unwritable
    path is an error there, naming it, rather than in the middle of an epoch."""

    def __init__(self, path):
        import os

        self.path = os.path.abspath(os.fspath(path))  # the job may change directory later
        self._seen: set[int] = set()
        self._open().close()

    def _open(self):
        try:
            return open(self.path, "a", encoding="utf-8")
        except OSError as e:  # OSError(errno, ...) is the errno's subclass: PermissionError, IsADirectoryError...
            raise OSError(
                e.errno,
                f"cannot append to the quarantine file {self.path!r}: {e.strerror} "
                "(choose a writable path, or quarantine=None)",
            ) from e

    def add(self, error: SampleError) -> None:
        import json

        if error.index in self._seen:
            return
        self._seen.add(error.index)
        line = json.dumps({"index": error.index, "path": error.path, "reason": error.reason, "epoch": error.epoch})
        with self._open() as f:
            f.write(line + "\n")
