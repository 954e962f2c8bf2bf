"""A page request over a listing: the cursors, the size and the order a caller asks for.

Apart from ``store/pagination.py``, which turns it into SQL, so that the API can take a page
without reaching into the store.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

MAX_PAGE = 1000


@dataclass(frozen=True, slots=True, kw_only=True)
class Page:
    """A page request: items after and/or before a cursor id, ``order`` by creation time."""

    after: str | None = None
    before: str | None = None
    limit: int | None = 50
    order: Literal["asc", "desc"] = "asc"


T = TypeVar("T")


def page_of(items: Sequence[T], page: Page, key: Callable[[T], str]) -> list[T]:
    """A page of a list that is already in its order (an agent's blocks or tools), cut in memory.

    ``after`` / ``before`` are the ids of items in the list, in the page's order (``order=desc``
    reverses the list), as :func:`nightshift.store.pagination.paginate` takes them: ``before``
    alone gives the ``limit`` items just before the cursor, so that a client walking backwards
    (with the first id it saw) sees each item once. A cursor that is not in the list gives an
    empty page, so a client paging with the last id it saw always comes to an end.
    """
    ordered = list(items) if page.order == "asc" else list(reversed(items))
    ids = [key(item) for item in ordered]
    start, end = 0, len(ordered)
    if page.after is not None:
        start = ids.index(page.after) + 1 if page.after in ids else len(ordered)
    if page.before is not None:
        end = ids.index(page.before) if page.before in ids else 0
    selected = ordered[start:end]
    if page.limit is None:
        return selected
    return selected[-page.limit :] if page.before is not None and page.after is None else selected[: page.limit]
