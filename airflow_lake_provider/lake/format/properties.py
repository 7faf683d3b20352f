"""Reading and writing ``hoodie.properties`` (Java properties text) and Hudi's table checksum."""

from __future__ import annotations

import datetime as dt
import re
import zlib
from collections.abc import Mapping

from airflow_lake_provider.lake.errors import TableConfigError

_HEX4 = re.compile(r"[0-9A-Fa-f]{4}")
_PLAIN_KEY = re.compile(r"[^=:\s\\]*")  # a key's characters up to a separator, space or escape
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
CHECKSUM_KEY = "hoodie.table.checksum"


def _unescape(text: str, source: str) -> str:
    if text.isascii() and "\\" not in text:  # nearly every value (a schema runs to kilobytes)
        return text
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != "\\" or i + 1 == len(text):
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "u":
            digits = text[i + 2 : i + 6]
            if not _HEX4.fullmatch(digits):  # Java's Properties.load refuses it too
                raise TableConfigError(
                    f"{source}: malformed \\uxxxx escape '{text[i : i + 6]}' (needs four hex digits)"
                )
            out.append(chr(int(digits, 16)))
            i += 6
            continue
        out.append(_ESCAPES.get(nxt, nxt))
        i += 2
    # Java strings are UTF-16: an escaped surrogate pair (\uD83D\uDE00) is one character.
    return "".join(out).encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def _logical_lines(text: str) -> list[str]:
    """Join continuation lines (a line ending in an odd number of backslashes)."""
    lines: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.lstrip() if pending else raw
        if not pending and line.lstrip()[:1] in ("#", "!"):
            lines.append(line)  # Java: a comment ends at its line break, even after a backslash
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            pending += line[:-1]
            continue
        lines.append(pending + line)
        pending = ""
    if pending:
        lines.append(pending)
    return lines


def parse_properties(text: str, source: str = "hoodie.properties") -> dict[str, str]:
    """Parse Java properties text: ``#``/``!`` comments, ``key=value`` or ``key:value``, escapes.

    :raises TableConfigError: naming ``source`` for a malformed ``\\uxxxx`` escape.
    """
    props: dict[str, str] = {}
    for line in _logical_lines(text):
        stripped = line.strip()
        if not stripped or stripped[0] in "#!":
            continue
        i = _PLAIN_KEY.match(stripped).end()  # type: ignore[union-attr]  # (matches "" at least)
        while i < len(stripped) and stripped[i] not in "=:" and not stripped[i].isspace():
            i += 2 if stripped[i] == "\\" else 1  # an escaped separator or space is part of the key
        key = stripped[:i]
        rest = stripped[i:].lstrip()
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip()
        props[_unescape(key, source)] = _unescape(rest, source)
    return props


def table_checksum(props: Mapping[str, str]) -> int:
    """Hudi's table checksum: CRC32 of ``"<database>.<table>"`` (database may be empty)."""
    name = f"{props.get('hoodie.database.name', '')}.{props['hoodie.table.name']}"
    return zlib.crc32(name.encode("utf-8"))


_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f", "\\": "\\\\"}


def _escape(value: str) -> str:
    """What Java's ``Properties.store`` escapes, but ``:``/``=``/``#``/``!`` (hudi-rs reads values raw
    and Java's ``load`` takes them unescaped): backslashes and control characters, and every
    character outside printable ASCII as ``\\uXXXX`` (``load`` decodes the file as ISO-8859-1, so
    raw UTF-8 would reach Java as other characters and fail its table checksum)."""
    if value.isascii() and value.isprintable() and "\\" not in value:
        return value
    out = []
    for ch in value:
        if ch in _NAMED:
            out.append(_NAMED[ch])
        elif " " <= ch <= "~":
            out.append(ch)
        else:
            data = ch.encode("utf-16-be")  # Java escapes UTF-16 code units (surrogate pairs too)
            out.extend(f"\\u{int.from_bytes(data[i : i + 2], 'big'):04X}" for i in range(0, len(data), 2))
    return "".join(out)


def format_properties(props: Mapping[str, str], now: dt.datetime | None = None) -> str:
    """Render properties as Java writes them, except ``:``/``=`` unescaped (hudi-rs reads values
    raw), sorted, checksum last."""
    moment = (now or dt.datetime.now(dt.timezone.utc)).astimezone(dt.timezone.utc)
    lines = [f"#Properties saved on {moment.isoformat().replace('+00:00', 'Z')}"]
    for key in sorted(k for k in props if k != CHECKSUM_KEY):
        lines.append(f"{_escape(key)}={_escape(props[key])}")
    lines.append(f"{CHECKSUM_KEY}={table_checksum(props)}")
    return "\n".join(lines) + "\n"
