"""README.md stays a page a new user reads, and the links between it and docs/ resolve.

The quick start must come early (a user reading from the top reaches it before the details), the
README stays short (details go to docs/), and a moved section must not leave a link pointing at a
file or a heading that is no longer there.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[2]
README = REPOSITORY / "README.md"
DOCS = sorted((REPOSITORY / "docs").glob("*.md"))

MAX_README_LINES = 620
QUICK_START_WITHIN = 150

# [text](target): the target up to its closing parenthesis, no spaces (so prose in parentheses is not a link).
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^(```|~~~)")


def _prose(text: str) -> str:
    """The text outside fenced code blocks, where a ``](...)`` is code, not a link."""
    kept: list[str] = []
    fenced = False
    for line in text.splitlines():
        if _FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if not fenced:
            kept.append(line)
    return "\n".join(kept)


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"`([^`]*)`", r"\1", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    for line in _prose(path.read_text(encoding="utf-8")).splitlines():
        match = re.match(r"^#{1,6} (.+)$", line)
        if match is None:
            continue
        anchor = _anchor(match.group(1))
        count = seen.get(anchor, 0)
        seen[anchor] = count + 1
        found.add(anchor if count == 0 else f"{anchor}-{count}")
    return found


def _relative_links(path: Path) -> list[str]:
    links = _LINK.findall(_prose(path.read_text(encoding="utf-8")))
    return [link for link in links if not re.match(r"^[a-z][a-z0-9+.-]*:", link)]


def test_the_readme_is_at_most_620_lines() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines: move details to docs/"


def test_the_quick_start_shows_the_python_client_within_the_first_150_lines() -> None:
    head = "\n".join(README.read_text(encoding="utf-8").splitlines()[:QUICK_START_WITHIN])
    assert "from nightshift.client import Client" in head
    assert "ns.batches.create(" in head
    assert "nightshift serve" in head


@pytest.mark.parametrize("path", [README, *DOCS], ids=lambda path: path.relative_to(REPOSITORY).as_posix())
def test_every_relative_link_points_at_an_existing_file_and_heading(path: Path) -> None:
    broken: list[str] = []
    for link in _relative_links(path):
        target, _, fragment = link.partition("#")
        file = (path.parent / target).resolve() if target else path
        if not file.exists():
            broken.append(f"{link}: no file {file}")
        elif fragment and file.suffix == ".md" and fragment not in _anchors(file):
            broken.append(f"{link}: no heading #{fragment} in {file.name}")
    assert not broken, f"{path.name}: " + "; ".join(broken)


def test_the_docs_folder_holds_what_the_readme_links_to() -> None:
    linked = {
        (README.parent / link.partition("#")[0]).resolve()
        for link in _relative_links(README)
        if link.partition("#")[0].startswith("docs/")
    }
    assert linked, "README.md links to no page of docs/"
    unlinked = [doc.name for doc in DOCS if doc.resolve() not in linked]
    assert not unlinked, f"pages of docs/ the README never links to: {unlinked}"
