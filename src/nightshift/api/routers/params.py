"""Query parameters shared by the list endpoints."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import Depends, Query

from nightshift.domain.pagination import MAX_PAGE, Page, page_of

__all__ = ["PageQuery", "page_of", "page_params"]


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
