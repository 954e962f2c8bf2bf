"""Cursor pagination over time-ordered ids (see ``nightshift.ids``), or over times a caller may set."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Column, ColumnElement, Select, and_, or_, select

from nightshift.domain.pagination import MAX_PAGE, Page

__all__ = ["MAX_PAGE", "Page", "paginate", "paginate_by_time"]


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


def paginate_by_time(
    query: Select[Any], time_column: Column[Any], id_column: Column[Any], page: Page, *, scope: ColumnElement[bool]
) -> Select[Any]:
    """Apply cursors, order and limit to ``query``, ordered by ``(time_column, id_column)``.

    For rows whose time the caller may give (a passage backdated on insert), so that the id's own
    time is not their order. ``after`` / ``before`` are ids, with :func:`paginate`'s meaning; the
    cursor's time is read in the same statement, among the rows ``scope`` allows (the same
    agent's, say), so a cursor that is not one of them (deleted, unknown, someone else's) gives an
    empty page rather than another list's order.
    """
    ascending = page.order == "asc"
    limit = MAX_PAGE if page.limit is None else max(1, min(page.limit, MAX_PAGE))

    def beyond(cursor: str, *, later: bool) -> ColumnElement[bool]:
        # correlate(None): the cursor's row is looked up on its own, not as the outer row.
        at = select(time_column).where(id_column == cursor, scope).correlate(None).scalar_subquery()
        if later:
            return or_(time_column > at, and_(time_column == at, id_column > cursor))
        return or_(time_column < at, and_(time_column == at, id_column < cursor))

    if page.after is not None:
        query = query.where(beyond(page.after, later=ascending))
    if page.before is not None:
        query = query.where(beyond(page.before, later=not ascending))
    if page.before is not None and page.after is None:
        # Walking backwards: the ``limit`` rows just before the cursor, shown in the page's order.
        backwards = (time_column.desc(), id_column.desc()) if ascending else (time_column.asc(), id_column.asc())
        nearest = query.order_by(*backwards).limit(limit).subquery()
        time_key, id_key = nearest.c[time_column.name], nearest.c[id_column.name]
        forwards = (time_key.asc(), id_key.asc()) if ascending else (time_key.desc(), id_key.desc())
        reordered: Select[Any] = select(nearest).order_by(*forwards)
        return reordered
    ordered = (time_column.asc(), id_column.asc()) if ascending else (time_column.desc(), id_column.desc())
    return query.order_by(*ordered).limit(limit)
