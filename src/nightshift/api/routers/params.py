"""Query parameters shared by the list endpoints."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import Depends, Query

from nightshift.store.pagination import MAX_PAGE, Page


def page_params(
    before: Annotated[str | None, Query(description="Return items created before this id")] = None,
    after: Annotated[str | None, Query(description="Return items listed after this id")] = None,
    limit: Annotated[int | None, Query(ge=1, le=MAX_PAGE, description="Page size")] = 50,
    order: Annotated[Literal["asc", "desc"] | None, Query(description="By creation time")] = None,
    ascending: Annotated[bool | None, Query(description="Letta's older name for order=asc")] = None,
) -> Page:
    if order is None:
        order = "desc" if ascending is False else "asc"
    return Page(before=before, after=after, limit=limit, order=order)


PageQuery = Annotated[Page, Depends(page_params)]
