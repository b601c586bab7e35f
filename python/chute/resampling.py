"""Which Pillow's resampling arithmetic chute follows: the installed one's, found at import.

chute resizes with Pillow's antialiased bilinear algorithm, operation for operation, so that its pixels
are PIL's (what torchvision's transforms produce on PIL images). Pillow resizes in two passes, one per
axis, and rounds to uint8 between them, so the order of the passes shows in the output, by one level on
some pixels:

* Pillow up to 12.x always runs the horizontal pass first;
* Pillow 13.0 and later (python-pillow/Pillow#9549) runs the vertical pass first when the height loses
  more than twice as many pixels as the width (in ``Resample.c``: ``ysize_in - ysize_out > 0`` and
  ``> 2 * (xsize_in - xsize_out)``).

chute reads the installed Pillow's version from its package metadata (without importing PIL) when it is
imported, and orders its passes the same way, so it stays bit-exact with either. ``set_pass_order``
overrides that for the whole process (tests, or a Pillow imported from elsewhere).
"""

from __future__ import annotations

import re
from importlib import metadata

from chute import _native

ORDERS = ("horizontal_first", "pillow13")


def order_for_pillow(version: str) -> str:
    """The pass order of Pillow `version` ("13.0.0" -> "pillow13"); horizontal_first when unparsable."""
    m = re.match(r"\s*(\d+)", version or "")
    return "pillow13" if m and int(m.group(1)) >= 13 else "horizontal_first"


def installed_pillow_version() -> str | None:
    try:
        return metadata.version("pillow")
    except metadata.PackageNotFoundError:
        return None


def pass_order() -> str:
    """The order chute's resize uses now: "horizontal_first" (Pillow <= 12) or "pillow13"."""
    return _native.resample_pass_order()


def set_pass_order(order: str) -> None:
    """Resize as Pillow <= 12 ("horizontal_first") or Pillow >= 13 ("pillow13") does, process-wide."""
    if order not in ORDERS:
        raise ValueError(f"pass order must be one of {ORDERS}, got {order!r}")
    _native.set_resample_pass_order(order)


def follow_installed_pillow() -> str:
    """Sets the pass order from the installed Pillow (none installed: horizontal_first) and returns it."""
    order = order_for_pillow(installed_pillow_version() or "")
    set_pass_order(order)
    return order
