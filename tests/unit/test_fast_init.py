"""fast_init: the same instances as the dataclass's own __init__, made by setting the slots."""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass, field
from typing import Any

import pytest

from nightshift.domain.fast_init import fast_init
from nightshift.domain.messages import Message


def sample_class() -> type[Any]:
    """A fresh frozen dataclass with a required field, defaults and a default factory."""

    @dataclass(frozen=True, slots=True, kw_only=True)
    class Sample:
        name: str
        count: int = 3
        tags: tuple[str, ...] = ()
        extra: dict[str, int] = field(default_factory=dict)

    return Sample


Plain: type[Any] = sample_class()  # the dataclass's own __init__
Fast: type[Any] = fast_init(sample_class())


def fields_of(obj: object) -> dict[str, object]:
    return {spec.name: getattr(obj, spec.name) for spec in dataclasses.fields(obj)}  # type: ignore[arg-type]


def test_it_makes_what_the_dataclass_makes() -> None:
    assert Fast.__init__.__code__ is not Plain.__init__.__code__  # the two inits under comparison
    for arguments in ({"name": "a"}, {"name": "b", "count": 7, "tags": ("x",), "extra": {"k": 1}}):
        assert fields_of(Fast(**arguments)) == fields_of(Plain(**arguments))
    assert str(inspect.signature(Fast)) == str(inspect.signature(Plain))
    assert Fast(name="a") == Fast(name="a")
    assert dataclasses.replace(Fast(name="a"), count=9) == Fast(name="a", count=9)


def test_each_instance_gets_its_own_default_from_the_factory() -> None:
    first, second = Fast(name="a"), Fast(name="b")

    assert first.extra == {} and first.extra is not second.extra


def test_the_instance_stays_frozen_and_bad_arguments_still_fail() -> None:
    made = Fast(name="a")

    with pytest.raises(dataclasses.FrozenInstanceError):
        made.name = "b"
    with pytest.raises(TypeError, match="missing 1 required keyword-only argument: 'name'"):
        Fast()
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour'"):
        Fast(name="a", colour="red")
    with pytest.raises(TypeError):
        Fast("a")


def test_it_refuses_a_class_whose_init_does_more() -> None:
    @dataclass(frozen=True, slots=True, kw_only=True)
    class Checked:
        name: str

        def __post_init__(self) -> None:
            pass

    @dataclass(slots=True, kw_only=True)
    class Mutable:
        name: str

    @dataclass(frozen=True, slots=True)
    class Positional:
        name: str

    for cls in (Checked, Mutable, Positional):
        with pytest.raises(TypeError):
            fast_init(cls)


def test_the_domain_types_use_it() -> None:
    assert Message.__init__.__code__.co_filename == "<string>"
    assert Message.__init__.__qualname__ == "Message.__init__"
