"""The fenced code blocks and links of the README and ``docs/*.md``, and the markers that say how a
block is tested.

A marker is an HTML comment on the line before a block's opening fence (blank lines between are
allowed)::

    <!-- test: skip REASON -->   not run (REASON is required and shows in pytest's summary)
    <!-- test: synopsis -->      ``lake`` usage lines: subcommands and options checked against the CLI

Unmarked blocks run by language: ``python`` (executed, or parsed as a DAG file), ``bash`` (run, or
for ``make``/``pip install`` lines checked), ``yaml``/``json``/``ini`` (parsed); ``text`` blocks
are diagrams and trees, not code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
LANGUAGES = ("python", "bash", "text", "yaml", "json", "ini")
_FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[^`\s]*)\s*$")
_MARKER = re.compile(r"^<!--\s*test:\s*(?P<kind>[a-z-]+)\s*(?P<arg>.*?)\s*-->$")
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\((?P<target>[^)\s]+)(?:\s+\"[^\"]*\")?\)")
_INLINE_CODE = re.compile(r"`[^`\n]*`")


def documents() -> list[Path]:
    """README.md and every Markdown file under docs/."""
    return [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    lang: str
    indent: str
    code: str
    marker: str | None  # "skip", "synopsis", or None
    marker_arg: str

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(REPO_ROOT)}:{self.line}"


def blocks(path: Path) -> list[Block]:
    """The fenced code blocks of ``path``, with the marker before each."""
    lines = path.read_text().splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "```"), None)
        assert end is not None, f"{path}:{i + 1}: code block never closed"
        before = next((lines[j].strip() for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        marker = _MARKER.match(before)
        found.append(
            Block(
                path=path,
                line=i + 1,
                lang=opening["lang"],
                indent=opening["indent"],
                code="\n".join(line[len(opening["indent"]) :] for line in lines[i + 1 : end]) + "\n",
                marker=marker["kind"] if marker else None,
                marker_arg=marker["arg"] if marker else "",
            )
        )
        i = end + 1
    return found


def prose(path: Path) -> str:
    """``path`` without its code blocks and inline code (where ``[x](y)`` is not a link)."""
    kept: list[str] = []
    inside = False
    for line in path.read_text().splitlines():
        if _FENCE.match(line):
            inside = not inside
            continue
        if not inside:
            kept.append(_INLINE_CODE.sub("", line))
    return "\n".join(kept)


def links(path: Path) -> list[str]:
    """The targets of the Markdown links in ``path``'s prose."""
    return [m["target"] for m in _LINK.finditer(prose(path))]


def headings(path: Path) -> list[tuple[int, str]]:
    """(level, GitHub anchor) of ``path``'s headings, outside code blocks. GitHub's anchor: lower
    case, punctuation dropped, spaces to hyphens (a repeated heading gets ``-1``, ``-2``...)."""
    found: list[tuple[int, str]] = []
    seen: dict[str, int] = {}
    inside = False
    for line in path.read_text().splitlines():
        if _FENCE.match(line):
            inside = not inside
            continue
        heading = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if inside or heading is None:
            continue
        text = heading[2].replace("`", "").lower()
        slug = re.sub(r"[^\w\- ]", "", text).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.append((len(heading[1]), slug if count == 0 else f"{slug}-{count}"))
    return found


def heading_anchors(path: Path) -> list[str]:
    return [anchor for _, anchor in headings(path)]
