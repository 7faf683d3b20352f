"""The README and docs/*.md: every relative link leads to a file of the repository (and to a heading
of it, for ``#anchor`` links), nothing points outside the clone, and each page starts with a table
of contents of its sections."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from doc_blocks import REPO_ROOT, documents, heading_anchors, headings, links, prose

DOCS = documents()


def _ids(paths: list[Path]) -> list[str]:
    return [str(p.relative_to(REPO_ROOT)) for p in paths]


def test_the_docs_folder_holds_the_reference_pages() -> None:
    names = {p.name for p in DOCS}
    assert {"README.md", "operators.md", "services.md", "cli.md", "compatibility.md", "internals.md"} <= names


@pytest.mark.parametrize("path", DOCS, ids=_ids(DOCS))
def test_relative_links_resolve_to_files_and_headings(path: Path) -> None:
    broken: list[str] = []
    for target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists():
            broken.append(f"{target}: no file {linked}")
        elif not linked.is_relative_to(REPO_ROOT):
            broken.append(f"{target}: outside the repository")
        elif anchor and (linked.suffix != ".md" or anchor not in heading_anchors(linked)):
            broken.append(f"{target}: no heading #{anchor} in {linked.relative_to(REPO_ROOT)}")
    assert broken == []


@pytest.mark.parametrize("path", DOCS, ids=_ids(DOCS))
def test_nothing_points_outside_the_clone(path: Path) -> None:
    """A clone has nothing above the repository: no path in a page (a link, or one named in code)
    climbs out of it."""
    climbing = re.findall(r"(?<![\w.])((?:\.\./)+[\w.-]*)", path.read_text())
    outside = [p for p in climbing if not (path.parent / p).resolve().is_relative_to(REPO_ROOT)]
    assert outside == []


@pytest.mark.parametrize("path", DOCS, ids=_ids(DOCS))
def test_each_page_lists_its_sections_at_the_top(path: Path) -> None:
    """A table of contents (a list of links before the first section, or under ``## Contents``)
    links every ``##`` heading."""
    sections = [anchor for level, anchor in headings(path) if level == 2 and anchor != "contents"]
    text = prose(path)
    top = re.split(r"(?m)^## (?!Contents$)", text, maxsplit=1)[0]
    toc = set(re.findall(r"(?m)^\s*- \[[^\]]*\]\(#([^)]+)\)", top))
    assert sections and [a for a in sections if a not in toc] == []


def test_links_and_anchors_are_checked() -> None:
    """The checker itself: a missing file and a missing heading are both found."""
    readme = REPO_ROOT / "README.md"
    assert "install" in heading_anchors(readme)
    assert "the-lake-connection-and-s3" in heading_anchors(REPO_ROOT / "docs" / "operators.md")
    assert "example-dags-dags" in heading_anchors(REPO_ROOT / "docs" / "operators.md")
    assert "no-such-heading" not in heading_anchors(readme)
