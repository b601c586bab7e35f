"""MixUp / CutMix after collation, as torchvision's reference training script applies them, on chute's engine.

The reference ``train.py`` batches with::

    collate_fn = lambda batch: mixup_cutmix(*default_collate(batch))   # or the same as a nested def

where ``mixup_cutmix`` is ``torchvision.transforms.v2``'s ``MixUp``, ``CutMix`` or a ``RandomChoice`` of them.
:func:`recognise` sees that shape without calling the function: the function's code object must be the one
Python compiles for that expression (a template compiled here, by this interpreter, with the function's own
names, from its closure or its globals), ``default_collate`` must be torch's, and the callee a v2 MixUp / CutMix /
RandomChoice with torchvision's default labels getter and no hooks. Then the ImageFolder fast path runs it
natively (``BatchMix``, cpp/include/chute/transform/batch_mix.h): the engine mixes each finished batch's images
on its worker threads while they decode the next batches, and :func:`mix_labels` mixes the labels with the
engine's draws, with torchvision's own formula. The batch is what torchvision's gives: a tuple ``(images,
soft labels)``, the labels one-hot float32 of shape ``(batch, num_classes)``.

Draws are chute's (seed, epoch, batch), with torchvision's distributions (batch_mix.h); they are not
torchvision's values, as RandomResizedCrop's are not. Any other ``collate_fn`` keeps falling back, with its reason.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import types
from dataclasses import dataclass

import torch
from torch.nn.functional import one_hot
from torch.utils.data import default_collate

from chute import _native
from chute.dataloader.base import Fallback

REFERENCE_SHAPE = "lambda batch: mixup_cutmix(*default_collate(batch))"
_V2 = "torchvision.transforms.v2"
_OPS = {"MixUp": "mixup", "CutMix": "cutmix"}


@dataclass(frozen=True)
class BatchTransform:
    """A recognised MixUp / CutMix collate: the native transform, the classes to one-hot into, the user's
    transform object (what the plan was made from) and whether MixUp is among the ops (float32 images only)."""

    native: _native.BatchMix
    num_classes: int
    transform: object
    has_mixup: bool


def recognise(collate_fn) -> BatchTransform | Fallback | None:
    """The batch transform of a collate_fn in the reference shape; a Fallback when it has the shape but a
    transform chute does not run natively; None for any other collate_fn."""
    found = _collated_call(collate_fn)
    if found is None:
        return None
    callee, collate = found
    if collate is not default_collate:
        return None
    return translate(callee)


def collate(transform, batch: list):
    """The recipe's collate_fn itself, ``transform(*default_collate(batch))``: what an epoch the engine cannot
    run (batches of varying sizes, a changed dataset) runs in-process."""
    return transform(*default_collate(batch))


def mix_labels(labels: torch.Tensor, num_classes: int, lam: float) -> torch.Tensor:
    """torchvision's ``_mixup_label``: the labels one-hot, float32, mixed with the batch rolled by one, with the
    weight the engine drew for the batch (MixUp's lam, or CutMix's box-corrected one)."""
    soft = one_hot(labels, num_classes=num_classes).float()
    return soft.roll(1, 0).mul_(1.0 - lam).add_(soft.mul(lam))


def translate(transform) -> BatchTransform | Fallback:
    """chute's BatchMix for a v2 MixUp, CutMix or RandomChoice of them, or a Fallback naming what is in the way."""
    name = type(transform).__name__
    if not _is_v2(transform):
        return Fallback(
            f"collate_fn applies {name} ({type(transform).__module__}) after default_collate: only "
            "torchvision.transforms.v2's MixUp, CutMix and RandomChoice of them run natively"
        )
    if name == "RandomChoice":
        ops, p = list(transform.transforms), [float(v) for v in transform.p]
    else:
        ops, p = [transform], []
    for op in {id(o): o for o in [transform, *ops]}.values():
        why = _hooked(op)
        if why:
            return Fallback(why)
    classes = set()
    for op in ops:
        op_name = type(op).__name__
        if not _is_v2(op) or op_name not in _OPS:
            return Fallback(f"RandomChoice of {op_name}: only MixUp and CutMix run natively after collation")
        getter = getattr(op, "_labels_getter", None)
        if getattr(getter, "__name__", "") != "_find_labels_default_heuristic" or not str(
            getattr(getter, "__module__", "")
        ).startswith(_V2):
            return Fallback(f"{op_name} has a custom labels_getter: chute takes the labels of (images, labels)")
        classes.add(op.num_classes)
    if len(classes) != 1 or not isinstance(next(iter(classes)), int) or isinstance(next(iter(classes)), bool):
        return Fallback(
            f"MixUp/CutMix num_classes {sorted(map(str, classes))}: chute one-hots index labels into one "
            "num_classes (torchvision raises without it)"
        )
    try:
        native = _native.BatchMix([(_OPS[type(op).__name__], float(op.alpha)) for op in ops], p)
    except ValueError as e:
        return Fallback(f"{name}: {e}")
    return BatchTransform(native, next(iter(classes)), transform, any(type(op).__name__ == "MixUp" for op in ops))


def _is_v2(t) -> bool:
    module = type(t).__module__
    return module == _V2 or module.startswith(_V2 + ".")


def _hooked(t) -> str | None:
    """Why calling ``t`` would do more than its forward (nn.Module hooks), or None."""
    for attr in ("_forward_hooks", "_forward_pre_hooks"):
        if getattr(t, attr, None):
            return f"{type(t).__name__} has forward hooks, which run only when torch calls it"
    hooks = getattr(torch.nn.modules.module, "_global_forward_hooks", None)
    pre = getattr(torch.nn.modules.module, "_global_forward_pre_hooks", None)
    if isinstance(t, torch.nn.Module) and (hooks or pre):
        return "global nn.Module forward hooks are registered, which run only when torch calls the transform"
    return None


# ---- the shape of the collate function -------------------------------------------------------------------


def _collated_call(fn) -> tuple[object, object] | None:
    """(callee, collate) when ``fn`` is exactly ``lambda b: callee(*collate(b))`` (or the same ``def``), the
    names bound in its closure or its globals; None otherwise. The function is never called."""
    if not isinstance(fn, types.FunctionType) or fn.__defaults__ or fn.__kwdefaults__:
        return None
    code = fn.__code__
    if code.co_argcount != 1 or code.co_kwonlyargcount or code.co_posonlyargcount:
        return None
    plain = inspect.CO_VARARGS | inspect.CO_VARKEYWORDS | inspect.CO_GENERATOR | inspect.CO_COROUTINE
    if code.co_flags & (plain | inspect.CO_ASYNC_GENERATOR | inspect.CO_ITERABLE_COROUTINE):
        return None
    names = [*code.co_names, *code.co_freevars]
    if len(names) != 2:
        return None
    for callee, collate in itertools.permutations(names):
        if any(
            _same_code(code, t)
            for t in _templates(
                code.co_varnames[0], callee, callee in code.co_freevars, collate, collate in code.co_freevars
            )
        ):
            try:
                return _value(fn, callee), _value(fn, collate)
            except (KeyError, ValueError):  # a name not bound (yet), an empty cell
                return None
    return None


@functools.cache
def _templates(arg: str, callee: str, callee_free: bool, collate: str, collate_free: bool) -> tuple:
    """The code objects this interpreter compiles for the reference shape, as a lambda and as a def, with these
    names, each bound in a closure or global as in the function compared."""
    free = [n for n, f in ((callee, callee_free), (collate, collate_free)) if f]
    binding = f"    {' = '.join(free)} = None\n" if free else ""
    source = (
        f"def _outer():\n{binding}"
        f"    _as_lambda = lambda {arg}: {callee}(*{collate}({arg}))\n"
        f"    def _as_def({arg}):\n"
        f"        return {callee}(*{collate}({arg}))\n"
        "    return _as_lambda, _as_def\n"
    )
    namespace: dict = {}
    try:
        exec(compile(source, "<chute: reference collate_fn>", "exec"), namespace)  # noqa: S102 (our own text)
    except SyntaxError:  # names that are keywords in this version: not the reference shape
        return ()
    return tuple(f.__code__ for f in namespace["_outer"]())


def _same_code(a: types.CodeType, b: types.CodeType) -> bool:
    return (
        a.co_code == b.co_code
        and a.co_names == b.co_names
        and a.co_freevars == b.co_freevars
        and a.co_varnames == b.co_varnames
        and a.co_consts == b.co_consts
        and a.co_argcount == b.co_argcount
    )


def _value(fn: types.FunctionType, name: str):
    code = fn.__code__
    if name in code.co_freevars:
        return fn.__closure__[code.co_freevars.index(name)].cell_contents  # ValueError: an empty cell
    if name in fn.__globals__:
        return fn.__globals__[name]
    builtins = fn.__globals__.get("__builtins__", {})
    return (builtins if isinstance(builtins, dict) else vars(builtins))[name]
