"""Read and check a requests file (JSON Lines) before a batch run is submitted.

The parsing is the client's (``nightshift.client.requests_file``); here each request is also
checked against the server's own schema of a request (``BatchRequestBody``), so that a bad message
is reported with its line before anything is sent, and the client's errors become ``CommandFailed``.
"""

from __future__ import annotations

from nightshift.api.batch_schemas import BatchRequestBody
from nightshift.cli_commands.client import CommandFailed
from nightshift.client.errors import InvalidRequestsFile
from nightshift.client.requests_file import RequestLine, checked_by
from nightshift.client.requests_file import parse_requests as parse_lines

__all__ = ["RequestLine", "parse_requests"]


def parse_requests(name: str, text: str) -> list[RequestLine]:
    """Parse and check every line of ``text`` (the contents of the file called ``name``).

    Raises:
        CommandFailed: at the first bad line, saying which line and what is wrong.
    """
    try:
        return parse_lines(name, text, check=checked_by(BatchRequestBody))
    except InvalidRequestsFile as error:
        raise CommandFailed(error.message) from None
