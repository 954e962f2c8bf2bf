"""Query parameters shared by the list endpoints."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Annotated, Literal, TypeVar

from fastapi import Depends, Query

from nightshift.store.pagination import MAX_PAGE, Page


async def page_params(
    before: Annotated[str | None, Query(description="Items before this id, in the listing's order")] = None,
    after: Annotated[str | None, Query(description="Items after this id, in the listing's order")] = None,
    limit: Annotated[int | None, Query(ge=1, le=MAX_PAGE, description="Page size")] = 50,
    order: Annotated[Literal["asc", "desc"] | None, Query(description="By creation time")] = None,
    ascending: Annotated[bool | None, Query(description="Letta's older name for order=asc")] = None,
) -> Page:
    # async: FastAPI would run a plain function in its thread pool (a thread hop per request).
    if order is None:
        order = "desc" if ascending is False else "asc"
    return Page(before=before, after=after, limit=limit, order=order)


PageQuery = Annotated[Page, Depends(page_params)]

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
