"""Reading a requests file from disk for ``batches.create_from_file``."""

from __future__ import annotations

from os import PathLike, fspath
from pathlib import Path

from nightshift.client.errors import InvalidRequestsFile
from nightshift.client.requests_file import RequestLine, parse_requests


def read_requests_file(path: str | PathLike[str]) -> tuple[str, list[RequestLine]]:
    """The file's name (for messages) and its checked requests.

    Raises:
        InvalidRequestsFile: it cannot be read, is not UTF-8 text, or a line is wrong.
    """
    name = fspath(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise InvalidRequestsFile(f"{name}: cannot read it ({error.strerror or error})") from None
    except UnicodeDecodeError:
        raise InvalidRequestsFile(f"{name}: not a text file (expected UTF-8 JSON Lines)") from None
    return name, parse_requests(name, text)
