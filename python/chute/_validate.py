"""Argument checks at the Python boundary, so that a bad argument is a Python error naming it, not
nanobind's "incompatible function arguments" or a comparison that fails halfway.

The rule: a value of the wrong type is a ``TypeError``, a number out of range a ``ValueError``; both name
the argument, the accepted range and the value given. The ranges here are those of the native types the
arguments cross into (``int``, ``int64_t``, ``uint64_t``, ``size_t``).

The loader's own options are not checked here: ``chute._native.LoaderOptions``/``DecodeOptions``/
``DeliveryOptions`` convert each keyword against the range stated beside its C++ field (``OptionRange``,
the same text as this module's), and their ``validate()`` and ``Loader::create`` check the rest, with the
defaults. This module serves what stays in Python: transforms, ``set_epoch``, torchrun's variables, paths,
``chute.pack``'s arguments.
"""

from __future__ import annotations

import math
import numbers
import operator
import os
import re

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
UINT64_MAX = 2**64 - 1

_NAMED = {INT32_MAX: "2**31 - 1", INT64_MAX: "2**63 - 1", UINT64_MAX: "2**64 - 1"}


def _bound(value: int) -> str:
    return _NAMED.get(value, str(value))


def _accepts(lo: int, hi: int, alternatives: tuple) -> str:
    text = f"an int in [{_bound(lo)}, {_bound(hi)}]"
    return " or ".join([text, *(repr(a) for a in alternatives)])


def integer(name: str, value, lo: int, hi: int, *, alternatives: tuple = ()) -> int:
    """``value`` as an int in ``[lo, hi]``. ``alternatives`` (e.g. ``'auto'``, ``None``) are also accepted
    and returned as they are; a string that is not one of them is a ValueError (a wrong choice), any other
    non-integer a TypeError. ``bool`` is not an int here."""
    if (value is None or isinstance(value, str)) and value in alternatives:
        return value
    accepts = _accepts(lo, hi, alternatives)
    if isinstance(value, str) and alternatives:
        raise ValueError(f"{name} must be {accepts}, got {value!r}")
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be {accepts}, got {value!r} ({type(value).__name__})")
    value = operator.index(value)  # numpy integers too
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be {accepts}, got {value}")
    return value


def real(name: str, value, lo: float | None = None, hi: float | None = None) -> float:
    """``value`` as a finite float in ``[lo, hi]`` (either bound may be open-ended)."""
    # numbers.Real, or what converts like one (a 0-d tensor); never a str, which float() would parse.
    if isinstance(value, (bool, str, bytes)) or not (isinstance(value, numbers.Real) or hasattr(value, "__float__")):
        raise TypeError(f"{name} must be a number, got {value!r} ({type(value).__name__})")
    try:
        value = float(value)
    except (TypeError, ValueError):  # a tensor of more than one element, say
        raise TypeError(f"{name} must be a number, got {value!r} ({type(value).__name__})") from None
    except OverflowError:  # an int beyond a float's range
        value = math.inf
    low = -math.inf if lo is None else lo
    high = math.inf if hi is None else hi
    if not (math.isfinite(value) and low <= value <= high):
        where = f" in [{low:g}, {high:g}]" if lo is not None or hi is not None else ""
        raise ValueError(f"{name} must be a finite number{where}, got {value!r}")
    return value


def reals(name: str, value, count: int) -> tuple[float, ...]:
    """A sequence of ``count`` finite numbers (e.g. ``scale=(0.08, 1.0)``, Normalize's ``mean``)."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") or not hasattr(value, "__iter__"):
        raise TypeError(f"{name} must be a sequence of {count} numbers, got {value!r}")
    if len(value) != count:
        raise ValueError(f"{name} must be a sequence of {count} numbers, got {len(value)}: {value!r}")
    return tuple(real(f"{name}[{i}]", v) for i, v in enumerate(value))


def path(name: str, value) -> str | bytes:
    """``os.fspath(value)``, with a TypeError naming the argument."""
    try:
        return os.fspath(value)
    except TypeError:
        raise TypeError(
            f"{name} must be a path (str, bytes or os.PathLike), got {value!r} ({type(value).__name__})"
        ) from None


def env_int(variable: str, lo: int, hi: int) -> int:
    """The environment variable ``variable`` (e.g. torchrun's ``RANK``) as an int in ``[lo, hi]``; a
    ValueError naming the variable and its value otherwise."""
    text = os.environ[variable]
    try:
        value = int(text.strip())
    except ValueError:
        raise ValueError(
            f"the environment variable {variable}={text!r} is not an integer "
            f"(chute reads {variable} as torchrun sets it; unset it or set it to an int)"
        ) from None
    if not lo <= value <= hi:
        raise ValueError(
            f"the environment variable {variable}={text!r} is out of range: it must be {_accepts(lo, hi, ())}"
        )
    return value


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]i?b?|b)?\s*$", re.IGNORECASE)
_UNITS = {
    "": 1,
    "b": 1,
    "k": 10**3,
    "m": 10**6,
    "g": 10**9,
    "t": 10**12,
    "ki": 2**10,
    "mi": 2**20,
    "gi": 2**30,
    "ti": 2**40,
}


def parse_size(text: str | int, name: str = "size") -> int:
    """``"1GB"`` -> 10**9, ``"512MiB"`` -> 512 * 2**20, ``"4096"`` -> 4096 (decimal units, binary with ``i``).
    ``name`` is the argument errors name."""
    if not isinstance(text, str):
        return integer(name, text, 0, UINT64_MAX)
    match = _SIZE.match(text)
    if not match:
        raise ValueError(f"{name}: not a size: {text!r} (examples: 1GB, 512MB, 256MiB, 100000)")
    unit = (match.group(2) or "").lower().rstrip("b")
    value = int(float(match.group(1)) * _UNITS[unit])
    if value > UINT64_MAX:
        raise ValueError(f"{name}: {text!r} is more than 2**64 - 1 bytes")
    return value
