"""BackgroundSampler: what the doctor's CPU and GPU samplers share, a thread that runs ``_run`` from
``with`` to the end of the block, with a stop event to wait on between samples."""

from __future__ import annotations

import threading
import time


class BackgroundSampler:
    def __init__(self, interval: float, thread_name: str):
        self.interval = interval
        self.start_time = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=thread_name, daemon=True)

    def _run(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        self.start_time = time.perf_counter()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
