"""A small ``multipart/form-data`` reader for file uploads (no extra dependency needed).

Reads the whole body at once, which is what a test double uploading batch files of some
megabytes needs; it splits on the boundary with bytes operations, so it stays fast.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from nightshift.emulator.errors import invalid

_PARAM = re.compile(r';\s*([A-Za-z0-9_-]+)="?([^";]*)"?')


@dataclass(frozen=True, slots=True, kw_only=True)
class FormPart:
    """One field of a form: its name, its filename when it is a file, and its bytes."""

    name: str
    data: bytes
    filename: str | None = None


def parse_form(body: bytes, content_type: str) -> dict[str, FormPart]:
    """The fields of a ``multipart/form-data`` body, by name.

    Raises:
        ApiError: 400 when the content type has no boundary or a part has no name.
    """
    params = dict(_PARAM.findall(content_type))
    boundary = params.get("boundary")
    if not content_type.startswith("multipart/form-data") or not boundary:
        raise invalid("Expected a multipart/form-data body with a boundary")
    fields: dict[str, FormPart] = {}
    for part in body.split(b"--" + boundary.encode())[1:]:
        if part.startswith(b"--"):
            break
        head, _, data = part.removeprefix(b"\r\n").partition(b"\r\n\r\n")
        headers: dict[str, str] = {}
        for line in head.decode("utf-8", "replace").split("\r\n"):
            key, _, value = line.partition(":")
            headers[key.strip().lower()] = value.strip()
        disposition = dict(_PARAM.findall(headers.get("content-disposition", "")))
        name = disposition.get("name")
        if not name:
            raise invalid("A multipart part has no name")
        fields[name] = FormPart(
            name=name,
            data=data.removesuffix(b"\r\n"),
            filename=disposition.get("filename"),
        )
    return fields
