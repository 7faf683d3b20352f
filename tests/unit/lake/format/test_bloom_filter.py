"""Damaged footer filters the lookup's probe must refuse (as the full decode does), never answering
"absent" for a key the file holds: padding where the length allows none, a DYNAMIC row 0 header."""

from __future__ import annotations

import base64

import pyarrow as pa
import pytest

from airflow_lake_provider.lake.errors import CorruptDataFileError
from airflow_lake_provider.lake.format import bloom_filter as bf

KEYS = pa.array([f"key-{i}" for i in range(5)], pa.string())


def _footer(settings: bf.BloomSettings) -> dict[bytes, bytes]:
    return bf.build(KEYS, settings).footer()


def _settings_with_padding(pads: int, type_code: str = bf.SIMPLE) -> bf.BloomSettings:
    """Small settings whose serialized filter ends with exactly ``pads`` '=' characters."""
    for entries in range(1, 200):
        settings = bf.BloomSettings(num_entries=entries, fpp=0.1, type_code=type_code, max_entries=entries)
        text = _footer(settings)[bf.FILTER_KEY.encode()]
        if len(text) - len(text.rstrip(b"=")) == pads:
            return settings
    raise AssertionError(f"no small filter ends with {pads} pads")


@pytest.mark.parametrize(("pads", "forged"), [(0, b"="), (0, b"=="), (1, b"==")])
def test_probe_refuses_padding_the_length_does_not_allow(pads: int, forged: bytes) -> None:
    footer = _footer(_settings_with_padding(pads))
    text = footer[bf.FILTER_KEY.encode()]
    footer[bf.FILTER_KEY.encode()] = text[: len(text) - len(forged)] + forged
    with pytest.raises(CorruptDataFileError):
        bf.decode(footer[bf.FILTER_KEY.encode()], bf.SIMPLE)
    with pytest.raises(CorruptDataFileError, match="bloom filter of s3://b/p/f.parquet"):
        bf.probe_footer(footer, KEYS, "s3://b/p/f.parquet")


def test_probe_refuses_a_dynamic_row_zero_header_that_differs() -> None:
    settings = bf.BloomSettings(num_entries=2, fpp=0.1, type_code=bf.DYNAMIC_V0, max_entries=10)
    filt = bf.build(KEYS, settings)
    assert len(filt.rows) == 3
    data = bytearray(bf.base64.b64decode(filt.serialize()))
    row0_size = bf._HEADER.size + bf._DYNAMIC.size + 5  # vector size field of row 0's header
    data[row0_size + 3] ^= 0x40
    footer = filt.footer()
    footer[bf.FILTER_KEY.encode()] = bf.base64.b64encode(bytes(data))
    with pytest.raises(CorruptDataFileError):
        bf.from_footer(footer)
    with pytest.raises(CorruptDataFileError, match="row header"):
        bf.probe_footer(footer, KEYS, "p/f.parquet")


def test_probe_still_reads_every_valid_padding() -> None:
    for pads in (0, 1, 2):
        footer = _footer(_settings_with_padding(pads))
        assert bf.probe_footer(footer, KEYS).tolist() == [True] * 5
        assert bf.probe_footer(footer, pa.array(["absent-key"] * 0, pa.string())).tolist() == []


def test_a_damaged_hash_count_is_refused_before_any_hashing() -> None:
    """A count of 2**31 - 1 would allocate keys x count positions: both readers refuse it first."""
    built = bf.build(pa.array(["k1", "k2"]), bf.BloomSettings(10, 0.01, "SIMPLE", 10))
    raw = bytearray(base64.b64decode(built.serialize()))
    raw[4:8] = (2**31 - 1).to_bytes(4, "big")
    text = base64.b64encode(bytes(raw))
    with pytest.raises(CorruptDataFileError, match="hash count 2147483647 is over 4096"):
        bf.decode(text, "SIMPLE", "f.parquet")
    with pytest.raises(CorruptDataFileError, match="hash count 2147483647 is over 4096"):
        bf.probe_footer({bf.FILTER_KEY.encode(): text}, pa.array(["k1"]), "f.parquet")
