"""A faster ``__init__`` for the frozen dataclasses a step makes by the ten thousand.

A frozen dataclass's generated ``__init__`` sets each field with ``object.__setattr__`` (the
class's own ``__setattr__`` refuses), a call per field, and a batch run makes about a hundred
such objects per agent (its window's messages, its blocks, the agent itself, each copy
``dataclasses.replace`` makes). :func:`fast_init` gives such a class an ``__init__`` with the same
signature and the same result that writes each slot through the slot's own descriptor, which
costs less.
"""

from __future__ import annotations

from dataclasses import MISSING, fields, is_dataclass
from typing import Any, TypeVar

T = TypeVar("T")


class _Factory:
    """A parameter whose default comes from its field's factory (shown as the dataclass shows it)."""

    def __repr__(self) -> str:
        return "<factory>"


_FACTORY = _Factory()


def fast_init(cls: type[T]) -> type[T]:
    """Replace the ``__init__`` of ``cls``, a frozen, slotted, keyword-only dataclass without
    ``__post_init__``: the same parameters, defaults and default factories, each slot set directly.

    Raises:
        TypeError: ``cls`` is not such a dataclass (its ``__init__`` would do more than set fields).
    """
    params = getattr(cls, "__dataclass_params__", None)
    if not (is_dataclass(cls) and params is not None and params.frozen and "__slots__" in cls.__dict__):
        raise TypeError(f"fast_init needs a frozen dataclass with slots, not {cls.__name__}")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"fast_init cannot keep {cls.__name__}.__post_init__")
    specs = [spec for spec in fields(cls) if spec.init]
    if len(specs) != len(fields(cls)) or not all(spec.kw_only for spec in specs):
        raise TypeError(f"fast_init needs every field of {cls.__name__} keyword-only and in __init__")
    scope: dict[str, Any] = {"_unset": _FACTORY}
    parameters: list[str] = []
    lines: list[str] = []
    for spec in specs:
        name = spec.name
        scope[f"_set_{name}"] = cls.__dict__[name].__set__  # the slot's member descriptor
        if spec.default is not MISSING:
            scope[f"_default_{name}"] = spec.default
            parameters.append(f"{name}=_default_{name}")
        elif spec.default_factory is not MISSING:
            scope[f"_factory_{name}"] = spec.default_factory
            parameters.append(f"{name}=_unset")
            lines.append(f"    if {name} is _unset:\n        {name} = _factory_{name}()")
        else:
            parameters.append(name)
        lines.append(f"    _set_{name}(self, {name})")
    source = f"def __init__(self, *, {', '.join(parameters)}):\n" + "\n".join(lines) + "\n"
    exec(source, scope)  # the dataclasses module builds __init__ the same way
    init = scope["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__doc__ = cls.__init__.__doc__
    init.__annotations__ = cls.__init__.__annotations__
    cls.__init__ = init  # type: ignore[method-assign]
    return cls
