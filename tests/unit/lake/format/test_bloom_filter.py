"""Hudi's record-key bloom filters (``format.bloom_filter``): decoding and rebuilding the filters of
Spark-written files, Hudi's settings, the filter our base files carry, and damaged footer filters the
lookup's probe must refuse (as the full decode does), never answering "absent" for a key the file
holds: padding where the length allows none, a DYNAMIC row 0 header."""

from __future__ import annotations

import base64
import io
import zipfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_lake_provider.lake.errors import CorruptDataFileError, TableConfigError
from airflow_lake_provider.lake.format import bloom_filter as bf
from airflow_lake_provider.lake.format.base_file import write_base_file

KEYS = pa.array([f"key-{i}" for i in range(5)], pa.string())
FILTER = bf.FILTER_KEY.encode()


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


HUDI_TABLES = Path(__file__).resolve().parents[3] / "data" / "hudi-tables"


def _spark_base_files() -> list[tuple[str, pa.Array, dict[bytes, bytes]]]:
    """(name, record keys, footer metadata) of every Spark-written base file with a bloom filter."""
    found = []
    for archive in sorted(HUDI_TABLES.glob("*.zip")):
        with zipfile.ZipFile(archive) as zf:
            for name in zf.namelist():
                if not name.endswith(".parquet") or name.startswith("__MACOSX"):
                    continue
                parquet = pq.ParquetFile(io.BytesIO(zf.read(name)))
                meta = parquet.metadata.metadata or {}
                if FILTER in meta:
                    keys = parquet.read(columns=["_hoodie_record_key"]).column(0)
                    found.append((f"{archive.stem}/{name}", keys, dict(meta)))
    return found


SPARK_FILES = _spark_base_files()


def test_bloom_spark_files_decode_answer_maybe_for_their_keys_and_rebuild_byte_identical() -> None:
    assert len(SPARK_FILES) >= 30  # every zip table but the no-meta-fields ones carries filters
    absent = pa.array([f"absent-key-{i}" for i in range(2000)])
    for name, keys, meta in SPARK_FILES:
        assert meta[bf.TYPE_CODE_KEY.encode()] == b"DYNAMIC_V0", name
        filt = bf.from_footer(meta, name)
        assert filt is not None
        assert (filt.type_code, filt.vector_size, filt.num_hashes) == ("DYNAMIC_V0", 2587966, 30), name
        assert filt.row_capacity == 60000 and len(filt.rows) == 1 and filt.active_count == len(keys)
        assert filt.might_contain(keys).all(), name
        # 1e-9 false positive rate at a few keys: none of 2,000 absent keys passes.
        assert not filt.might_contain(absent).any(), name
        # Our writer lays out the same keys bit for bit as Spark's did.
        assert bf.build(keys).serialize().encode() == meta[FILTER], name
        # The lookup's probe, which decodes only the keys' bits, answers as the whole filter.
        probe = bf.probe_footer(meta, pa.concat_arrays([keys.combine_chunks(), absent]), name)
        assert probe is not None and probe[: len(keys)].all() and not probe[len(keys) :].any(), name


def test_bloom_default_settings_are_hudis() -> None:
    default = bf.BloomSettings.from_options({})
    assert default == bf.BloomSettings(60_000, 1e-9, "DYNAMIC_V0", 100_000)
    assert (default.vector_size, default.num_hashes) == (2587966, 30)
    small = bf.BloomSettings.from_options(
        {
            "hoodie.index.bloom.num_entries": "1000",
            "hoodie.index.bloom.fpp": "0.01",
            "hoodie.bloom.index.filter.type": "simple",
            "hoodie.bloom.index.filter.dynamic.max.entries": "5000",
        }
    )
    assert small == bf.BloomSettings(1000, 0.01, "SIMPLE", 5000)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("hoodie.index.bloom.num_entries", "0", "num_entries must be positive"),
        ("hoodie.index.bloom.num_entries", "many", "num_entries='many' is not a whole number"),
        ("hoodie.index.bloom.fpp", "1.5", "fpp must be in"),
        ("hoodie.bloom.index.filter.type", "CUCKOO", "SIMPLE or DYNAMIC_V0"),
    ],
)
def test_bloom_bad_option_raises_naming_it(key: str, value: str, message: str) -> None:
    with pytest.raises(TableConfigError, match=message):
        bf.BloomSettings.from_options({key: value})


def test_bloom_dynamic_rows_grow_then_spread_as_java_does() -> None:
    settings_ = bf.BloomSettings(num_entries=4, fpp=0.01, max_entries=10)
    keys = pa.array([f"key{i}" for i in range(20)])
    filt = bf.build(keys, settings_)
    # Rows are added while rows x 4 < 10: 3 rows take keys 0-11; the active row counts on past it.
    assert len(filt.rows) == 3 and filt.row_capacity == 4 and filt.active_count == 20 - 8
    back = bf.decode(filt.serialize(), "DYNAMIC_V0")
    assert back == filt
    assert back.might_contain(keys).all()


def test_bloom_corrupt_filter_raises_corrupt_data_file() -> None:
    with pytest.raises(CorruptDataFileError, match="cannot decode the bloom filter of f.parquet"):
        bf.decode("AAAA", "DYNAMIC_V0", "f.parquet")
    with pytest.raises(CorruptDataFileError, match="Only base64 data"):
        bf.decode("!!!", "SIMPLE", "f.parquet")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    keys=st.lists(st.text(min_size=1, max_size=40), min_size=1, max_size=200),
    probes=st.lists(st.text(min_size=1, max_size=40), max_size=50),
    per_row=st.integers(1, 50),
    max_entries=st.integers(0, 200),
    kind=st.sampled_from(["SIMPLE", "DYNAMIC_V0"]),
)
def test_bloom_property_no_false_negatives(
    keys: list[str], probes: list[str], per_row: int, max_entries: int, kind: str
) -> None:
    settings_ = bf.BloomSettings(num_entries=per_row, fpp=0.05, type_code=kind, max_entries=max_entries)
    filt = bf.decode(bf.build(pa.array(keys), settings_).serialize(), kind)
    assert filt.might_contain(pa.array(keys)).all()
    # Answers are per key: a batch mixing absent keys still says "maybe" for every present one.
    mixed = pa.array(probes + keys)
    assert filt.might_contain(mixed)[len(probes) :].all()


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    keys=st.lists(st.text(min_size=1, max_size=20), min_size=1, max_size=120),
    probes=st.lists(st.text(min_size=1, max_size=20), max_size=40),
    per_row=st.integers(1, 40),
    max_entries=st.integers(0, 150),
    fpp=st.sampled_from([0.5, 0.05, 0.001]),
    kind=st.sampled_from(["SIMPLE", "DYNAMIC_V0"]),
)
def test_bloom_probe_answers_as_the_decoded_filter(
    keys: list[str], probes: list[str], per_row: int, max_entries: int, fpp: float, kind: str
) -> None:
    """Every answer, false positives included (fpp 0.5 makes them common), bit for bit."""
    built = bf.build(pa.array(keys), bf.BloomSettings(per_row, fpp, kind, max_entries))
    asked = pa.array(probes + keys)
    expected = bf.decode(built.serialize(), kind).might_contain(asked)
    answer = bf.probe_footer(built.footer(), asked)
    assert answer is not None and answer.tolist() == expected.tolist()


def test_bloom_probe_refuses_a_damaged_filter_and_reads_none_without_one() -> None:
    built = bf.build(pa.array([f"k{i}" for i in range(30)]), bf.BloomSettings(10, 0.01, "DYNAMIC_V0", 40))
    footer = built.footer()
    text = footer[FILTER]
    assert bf.probe_footer({}, pa.array(["k1"])) is None
    damaged = {
        "cut short": text[:-4],
        "trailing quad": text + b"AAAA",
        "too short for a header": b"AAAA",
        # A bad character inside the bits one key's hashes land on (all of them: every quad).
        "bad character": b"!" * len(text),
    }
    for what, bad in damaged.items():
        with pytest.raises(CorruptDataFileError, match="cannot decode the bloom filter of f.parquet"):
            bf.probe_footer({**footer, FILTER: bad}, pa.array(["k1"]), "f.parquet")
            pytest.fail(f"{what}: no error")
    # A row whose header differs from the filter's (hash count 9, not 7, in the second row).
    raw = bytearray(base64.b64decode(text))
    second_row = bf._HEADER.size + bf._DYNAMIC.size + bf._HEADER.size + (built.vector_size + 7) // 8
    assert built.num_hashes == 7
    raw[second_row + 7] = 9
    assert len(built.rows) >= 2
    with pytest.raises(CorruptDataFileError, match="row header"):
        bf.probe_footer({**footer, FILTER: base64.b64encode(bytes(raw))}, pa.array(["k1"]), "f.parquet")
    with pytest.raises(CorruptDataFileError, match="unknown bloom filter type code"):
        bf.probe_footer({**footer, bf.TYPE_CODE_KEY.encode(): b"CUCKOO"}, pa.array(["k1"]), "f.parquet")


def test_bloom_base_file_we_write_carries_a_filter_that_decodes_back() -> None:
    keys = [f"id:{i}" for i in range(500)]
    rows = pa.table({"_hoodie_record_key": keys, "v": list(range(500))})
    sink = io.BytesIO()
    write_base_file(sink, rows)
    meta = pq.ParquetFile(io.BytesIO(sink.getvalue())).metadata.metadata
    assert meta[bf.TYPE_CODE_KEY.encode()] == b"DYNAMIC_V0"
    assert (meta[b"hoodie_min_record_key"], meta[b"hoodie_max_record_key"]) == (b"id:0", b"id:99")
    filt = bf.from_footer(meta)
    assert filt is not None and filt.might_contain(pa.array(keys)).all()
    assert filt == bf.build(pa.array(keys))
