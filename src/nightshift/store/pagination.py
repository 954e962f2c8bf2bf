"""Cursor pagination over time-ordered ids (see ``nightshift.ids``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import Column, Select, select

MAX_PAGE = 1000


@dataclass(frozen=True, slots=True, kw_only=True)
class Page:
    """A page request: items after and/or before a cursor id, ``order`` by creation time."""

    after: str | None = None
    before: str | None = None
    limit: int | None = 50
    order: Literal["asc", "desc"] = "asc"


def paginate(query: Select[Any], id_column: Column[Any], page: Page) -> Select[Any]:
    """Apply cursors, order and limit to ``query``.

    Ids sort in creation order, so ``after`` means "created later than" with ascending order and
    "further in the listing" with descending order, as Letta's clients expect when they page
    forward with the last id they saw.
    """
    ascending = page.order == "asc"
    limit = MAX_PAGE if page.limit is None else max(1, min(page.limit, MAX_PAGE))
    if page.before is not None and page.after is None:
        # Walking backwards: the ``limit`` items just before the cursor, shown in the page's order.
        window = query.where(id_column < page.before if ascending else id_column > page.before)
        nearest = window.order_by(id_column.desc() if ascending else id_column.asc()).limit(limit).subquery()
        key = nearest.c[id_column.name]
        reordered: Select[Any] = select(nearest).order_by(key.asc() if ascending else key.desc())
        return reordered
    if page.after is not None:
        query = query.where(id_column > page.after if ascending else id_column < page.after)
    if page.before is not None:
        query = query.where(id_column < page.before if ascending else id_column > page.before)
    return query.order_by(id_column.asc() if ascending else id_column.desc()).limit(limit)
