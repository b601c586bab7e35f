"""The remote layer: a :class:`chute.ray.RemoteLoader`'s actors, seen from the trainer over the measured steps.

The doctor does not time the actors itself: RemoteLoader keeps the figures (``stats()``: the actors' time in
the calls that made the trainer's batches, the object-store transfer, the trainer's wait and own time), and
its ``stats_since(earlier)`` gives them over the doctor's measured steps, with docs/SCALE.md's model on them
(``actors_needed``, ``actor_gain``: ``chute.ray.loader.scale_model``, the model's one home). This module
says whether a loader is remote and turns that dict into the :class:`RemoteReport` the verdict and the
reports read.

Ray is optional and heavy: nothing here imports it. A RemoteLoader exists only once ``chute.ray.loader`` has
been imported, so :func:`is_remote` looks for that module in ``sys.modules`` and answers False without it.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass


def is_remote(loader) -> bool:
    """Whether ``loader`` is a :class:`chute.ray.RemoteLoader` (never imports Ray)."""
    module = sys.modules.get("chute.ray.loader")
    return module is not None and isinstance(loader, module.RemoteLoader)


@dataclass
class RemoteReport:
    """A RemoteLoader over the measured steps. Times are milliseconds per batch the trainer received."""

    actors: int  # live actors
    cpus_per_actor: float
    batches: int
    actor_ms: float  # the actors' time in the calls that made these batches (summed over actors)
    transfer_ms: float  # ray.get of a ready batch: object-store transfer and deserialisation
    wait_ms: float  # the trainer blocked in next() (transfer included)
    consumer_ms: float  # the trainer's own time between batches (its step)
    stall_fraction: float  # wait / (wait + own time), as RemoteLoader measured it
    actors_needed: int | None  # the model's actors for the trainer not to wait (None: no figure to base it on)
    actor_gain: float  # the model's speed-up of the batches the trainer receives, with actors_needed
    resubmitted: int = 0  # batches sent again after their actor died
    max_outstanding: int = 0
    max_inflight: int = 0

    @property
    def actor_wall_ms(self) -> float:
        """The actors' time per batch of wall time, the actors working in parallel."""
        return self.actor_ms / max(self.actors, 1)

    @property
    def actor_wait_ms(self) -> float:
        """The part of the trainer's wait that is not the transfer: waiting for an actor to finish its
        batch (and the driver's own work, submitting and waiting)."""
        return max(self.wait_ms - self.transfer_ms, 0.0)

    @property
    def stage(self) -> str:
        """Where the trainer's wait goes: ``"transfer"`` when the object-store transfer is most of it, else
        ``"actors"``."""
        return "transfer" if self.transfer_ms >= self.actor_wait_ms else "actors"

    @classmethod
    def from_stats(cls, s: dict) -> RemoteReport:
        """From ``RemoteLoader.stats()`` or ``stats_since()``."""
        return cls(
            actors=s["actors"],
            cpus_per_actor=s["num_cpus_per_actor"],
            batches=s["batches"],
            actor_ms=1e3 * s["actor_s_per_batch"],
            transfer_ms=1e3 * s["transfer_s_per_batch"],
            wait_ms=1e3 * s["wait_s_per_batch"],
            consumer_ms=1e3 * s["consumer_s_per_batch"],
            stall_fraction=s["stall_fraction"],
            actors_needed=s["actors_needed"],
            actor_gain=s["actor_gain"],
            resubmitted=s["resubmitted"],
            max_outstanding=s["max_outstanding"],
            max_inflight=s["max_inflight"],
        )

    def summary(self) -> str:
        """One line of the figures, for the evidence and the reports."""
        return (
            f"{self.actors} actor{'s' if self.actors != 1 else ''} ({self.cpus_per_actor:g} CPU each): actor time "
            f"{self.actor_ms:.1f} ms per batch ({self.actor_wall_ms:.1f} ms of wall time, in parallel), "
            f"object-store transfer {self.transfer_ms:.2f} ms, trainer wait {self.wait_ms:.1f} ms "
            f"(stall {100 * self.stall_fraction:.0f}%), trainer's own time {self.consumer_ms:.1f} ms, over "
            f"{self.batches} batches"
        )

    def model(self) -> str:
        """The basis of the "add actors" estimate: RemoteLoader's model (docs/SCALE.md) on these figures."""
        floor = self.consumer_ms + self.transfer_ms
        n = self.actors_needed
        return (
            f"model (RemoteLoader's, docs/SCALE.md): with K actors the trainer gets a batch every "
            f"max(actor time / K, own time + transfer) = max({self.actor_ms:.1f} / K, {floor:.1f}) ms; "
            f"K = {n} brings the actors to {self.actor_ms / n:.1f} ms against {self.wait_ms + self.consumer_ms:.1f} ms "
            f"per batch now, capped by linear scaling ({n}/{self.actors}); the driver's own work per batch is "
            f"not in the model"
        )

    def rows(self) -> list[tuple[str, str]]:
        """The figures as (figure, value) rows, for the reports' tables."""
        rows = [
            (
                "actors",
                f"{self.actors} live, {self.cpus_per_actor:g} CPU each; max_inflight {self.max_inflight} "
                f"(most outstanding {self.max_outstanding})",
            ),
            (
                "actor time",
                f"{self.actor_ms:.1f} ms per batch, summed over actors ({self.actor_wall_ms:.1f} ms of wall time in "
                f"parallel)",
            ),
            ("object-store transfer", f"{self.transfer_ms:.2f} ms per batch (ray.get of a ready batch)"),
            (
                "trainer wait",
                f"{self.wait_ms:.1f} ms per batch ({self.actor_wait_ms:.1f} ms of it not the transfer); "
                f"stall {100 * self.stall_fraction:.0f}%",
            ),
            ("trainer's own time", f"{self.consumer_ms:.1f} ms per batch"),
        ]
        n = self.actors_needed
        if n is not None:
            rows.append(
                (
                    "model (docs/SCALE.md)",
                    f"{n} actor{'s' if n != 1 else ''} keep the trainer busy; x{self.actor_gain:.1f} the batches "
                    f"it receives (estimate)",
                )
            )
        if self.resubmitted:
            rows.append(("resent", f"{self.resubmitted} batches, after their actor died"))
        return rows
