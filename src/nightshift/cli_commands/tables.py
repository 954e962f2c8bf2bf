"""How the CLI prints its lists: tables whose ids stay whole, or JSON for a script (``--json``).

An id is what a person copies into the next command (``keys revoke``, ``batch watch``), so a
table never folds or cuts one: its id columns (and its times and figures) are ``no_wrap`` and the
other columns shrink first. When even that does not fit (a narrow terminal, ``COLUMNS=60``), the
table is drawn wider than the screen rather than with a broken id: a terminal shows the long
lines wrapped, and copying still takes the id whole.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

JsonOption = Annotated[
    bool, typer.Option("--json", help="Print the list as one JSON array (for scripts), not as a table.")
]

# Wider than this, a table is not worth drawing: the lines are left for the terminal to wrap.
MAX_TABLE_WIDTH = 1000
_STEP = 8
# What a column that may wrap shows at least of its longest word (a name, a model), if it is longer.
WORD_SHOWN = 10


def print_table(console: Console, table: Table) -> None:
    """Print ``table`` on ``console`` with the cells of its ``no_wrap`` columns (its ids, times and
    figures) whole, widening it past the console's width only as far as that needs.

    Wide enough also means that the other columns were not squeezed to a few characters: rich
    shrinks them to make room, down to nothing; each must show its longest word, or its first
    ``WORD_SHOWN`` characters.
    """
    shown = console.width
    width = shown
    while width < MAX_TABLE_WIDTH and not _fits(console, table, width):
        width += _STEP
    if width == shown:
        console.print(table)
        return
    console.width = width
    try:
        console.print(table)
    finally:
        console.width = shown


def print_json(items: Any) -> None:
    """Print ``items`` as indented JSON on stdout: no colour, no markup, no width limit."""
    typer.echo(json.dumps(items, indent=2, ensure_ascii=False, default=str))


def _fits(console: Console, table: Table, width: int) -> bool:
    lines = console.render_lines(table, console.options.update_width(width), pad=False)
    text = "\n".join("".join(segment.text for segment in line) for line in lines)
    # The cells of a column share its width: if its longest one shows whole, all of them do.
    for column in table.columns:
        cells = [_plain(console, cell) for cell in column.cells]
        if table.show_header and isinstance(column.header, str):
            cells.append(column.header)
        if column.no_wrap:
            longest = max(cells, key=len, default="")
        else:
            longest = max((word for cell in cells for word in cell.split()), key=len, default="")[:WORD_SHOWN]
        if longest not in text:
            return False
    return True


def _plain(console: Console, cell: RenderableType) -> str:
    """A cell's text as it shows (a string cell is markup), its lines apart."""
    if isinstance(cell, str):
        cell = console.render_str(cell)
    return cell.plain if isinstance(cell, Text) else ""
