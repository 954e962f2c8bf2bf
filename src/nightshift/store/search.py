"""Full-text search with the database's own engine: FTS5 on SQLite, tsvector on PostgreSQL.

The user's query is reduced to its words (no operator syntax reaches the engine), any word may
match, and rows come back ranked best first (bm25 on SQLite, ts_rank on PostgreSQL).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Column, Select, Table, bindparam, func, literal_column, select, text

_WORD = re.compile(r"\w+", re.UNICODE)


def query_words(query: str) -> list[str]:
    """The searchable words of a free-text query, lower-cased, without repeats."""
    return list(dict.fromkeys(w.lower() for w in _WORD.findall(query)))


def ranked_select(
    dialect: str, table: Table, column: Column[Any], query: str, *, read: Sequence[Column[Any]] | None = None
) -> Select[Any] | None:
    """``SELECT table.*`` (or the columns ``read``) restricted to rows matching ``query`` and ordered by rank.

    ``column`` is the indexed text column of ``table``; on SQLite a ``<table>_fts`` FTS5 table
    over it is kept in step (new messages by ``messages.insert_messages``, the rest by triggers),
    on PostgreSQL an expression index covers it (the migrations create both). Returns None when the
    query has no words.
    """
    words = query_words(query)
    if not words:
        return None
    if dialect == "sqlite":
        fts = f"{table.name}_fts"
        match = " OR ".join('"' + w.replace('"', "") + '"' for w in words)
        hits = (
            select(
                literal_column("rowid").label("hit_rowid"),
                literal_column(f"bm25({fts})").label("rank"),
            )
            .select_from(text(fts))
            .where(text(f"{fts} MATCH :fts_query").bindparams(bindparam("fts_query", match)))
            .subquery("hits")
        )
        return (
            select(*(read or table.c))
            .join(hits, literal_column(f"{table.name}.rowid") == hits.c.hit_rowid)
            .order_by(hits.c.rank.asc())
        )
    vector = func.to_tsvector(literal_column("'english'"), column)
    tsquery = func.to_tsquery(literal_column("'english'"), bindparam("ts_query", " | ".join(words)))
    return select(*(read or table.c)).where(vector.op("@@")(tsquery)).order_by(func.ts_rank(vector, tsquery).desc())
