"""Instants (times, file names, ordering, clock), hoodie.properties text and TableConfig validation."""

from __future__ import annotations

import datetime as dt
import zipfile
import zlib
from pathlib import Path

import pytest

from airflow_lake_provider.lake.errors import (
    InvalidInstantError,
    TableConfigError,
    UnsupportedTableVersionError,
)
from airflow_lake_provider.lake.format.properties import (
    CHECKSUM_KEY,
    format_properties,
    parse_properties,
    table_checksum,
)
from airflow_lake_provider.lake.format.table_config import (
    DEFAULT_PAYLOAD,
    OVERWRITE_PAYLOAD,
    MergeMode,
    TableConfig,
    TableType,
)
from airflow_lake_provider.lake.timeline import layout
from airflow_lake_provider.lake.timeline.instant import (
    Action,
    Instant,
    InstantClock,
    State,
    format_instant,
    instant_to_datetime,
    validate_instant_time,
    validate_timeline_time,
)

HUDI_TABLES = Path(__file__).resolve().parents[3] / "data" / "hudi-tables"  # see tests/data/README.md

TABLE_ZIPS = sorted(HUDI_TABLES.glob("*.zip"))

T = "20250126040823628"

# Every (action, state) of spec section 4.2 and its file name in layout version 1.
FILE_NAMES = [
    (Action.COMMIT, State.REQUESTED, f"{T}.commit.requested"),
    (Action.COMMIT, State.INFLIGHT, f"{T}.inflight"),
    (Action.COMMIT, State.COMPLETED, f"{T}.commit"),
    (Action.DELTACOMMIT, State.REQUESTED, f"{T}.deltacommit.requested"),
    (Action.DELTACOMMIT, State.INFLIGHT, f"{T}.deltacommit.inflight"),
    (Action.DELTACOMMIT, State.COMPLETED, f"{T}.deltacommit"),
    (Action.REPLACECOMMIT, State.REQUESTED, f"{T}.replacecommit.requested"),
    (Action.REPLACECOMMIT, State.INFLIGHT, f"{T}.replacecommit.inflight"),
    (Action.REPLACECOMMIT, State.COMPLETED, f"{T}.replacecommit"),
    (Action.COMPACTION, State.REQUESTED, f"{T}.compaction.requested"),
    (Action.COMPACTION, State.INFLIGHT, f"{T}.compaction.inflight"),
    (Action.LOGCOMPACTION, State.REQUESTED, f"{T}.logcompaction.requested"),
    (Action.LOGCOMPACTION, State.INFLIGHT, f"{T}.logcompaction.inflight"),
    (Action.CLEAN, State.REQUESTED, f"{T}.clean.requested"),
    (Action.CLEAN, State.INFLIGHT, f"{T}.clean.inflight"),
    (Action.CLEAN, State.COMPLETED, f"{T}.clean"),
    (Action.ROLLBACK, State.REQUESTED, f"{T}.rollback.requested"),
    (Action.ROLLBACK, State.INFLIGHT, f"{T}.rollback.inflight"),
    (Action.ROLLBACK, State.COMPLETED, f"{T}.rollback"),
    (Action.SAVEPOINT, State.INFLIGHT, f"{T}.savepoint.inflight"),
    (Action.SAVEPOINT, State.COMPLETED, f"{T}.savepoint"),
    (Action.RESTORE, State.REQUESTED, f"{T}.restore.requested"),
    (Action.RESTORE, State.INFLIGHT, f"{T}.restore.inflight"),
    (Action.RESTORE, State.COMPLETED, f"{T}.restore"),
    (Action.INDEXING, State.REQUESTED, f"{T}.indexing.requested"),
    (Action.INDEXING, State.INFLIGHT, f"{T}.indexing.inflight"),
    (Action.INDEXING, State.COMPLETED, f"{T}.indexing"),
]


# -- instant file names ---------------------------------------------------------------------------
@pytest.mark.parametrize(("action", "state", "name"), FILE_NAMES, ids=[n for _, _, n in FILE_NAMES])
def test_instant_file_name_every_action_and_state_round_trips(
    action: Action, state: State, name: str
) -> None:
    instant = Instant(T, state, action)
    assert layout.file_name(instant) == name
    assert layout.parse_file_name(name) == instant


def test_instant_bare_inflight_is_commit_inflight() -> None:
    assert layout.parse_file_name(f"{T}.inflight") == Instant(T, State.INFLIGHT, Action.COMMIT)


def test_instant_fourteen_digit_time_round_trips() -> None:
    parsed = layout.parse_file_name("20240707001301.commit")
    assert parsed == Instant("20240707001301", State.COMPLETED, Action.COMMIT)
    assert layout.file_name(parsed) == "20240707001301.commit"


@pytest.mark.parametrize(
    ("action", "completes_as"),
    [(Action.COMPACTION, Action.COMMIT), (Action.LOGCOMPACTION, Action.DELTACOMMIT)],
)
def test_instant_compaction_completes_as_other_action(action: Action, completes_as: Action) -> None:
    completed = Instant(T, State.INFLIGHT, action).with_state(State.COMPLETED)
    assert completed == Instant(T, State.COMPLETED, completes_as)
    assert layout.file_name(completed) == f"{T}.{completes_as.value}"
    # A pending compaction keeps its own action word.
    assert (
        layout.file_name(Instant(T, State.REQUESTED, action).with_state(State.INFLIGHT))
        == f"{T}.{action.value}.inflight"
    )
    # There is no completed compaction file of its own: asking for one is refused, parsing one yields None.
    with pytest.raises(InvalidInstantError, match=f"stored as {completes_as.value}"):
        _ = layout.file_name(Instant(T, State.COMPLETED, action))
    assert layout.parse_file_name(f"{T}.{action.value}") is None


@pytest.mark.parametrize(
    "name",
    [
        "hoodie.properties",
        ".aux",
        ".temp",
        ".schema",
        "archived",
        "metadata",
        f"{T}.commit.crc",
        f"{T}.deltacommit.inflight.tmp",
        f".{T}.commit.0f3a.tmp",
        f"{T}.unknownaction",
        f"{T}.unknownaction.requested",
        f"{T}.commit.completed",
        f"{T[:-1]}.commit",  # 16 digits
        f"{T}0.commit",  # 18 digits
        f"{T}",
        "",
    ],
)
def test_instant_from_file_name_non_instant_returns_none(name: str) -> None:
    assert layout.parse_file_name(name) is None


def test_instant_ordering_time_then_state() -> None:
    a_req = Instant("20250101000000001", State.REQUESTED, Action.COMMIT)
    a_inf = Instant("20250101000000001", State.INFLIGHT, Action.COMMIT)
    a_done = Instant("20250101000000001", State.COMPLETED, Action.COMMIT)
    b_req = Instant("20250101000000002", State.REQUESTED, Action.CLEAN)
    c_done = Instant("20250101000000100", State.COMPLETED, Action.DELTACOMMIT)
    shuffled = [c_done, a_done, b_req, a_req, a_inf]
    assert sorted(shuffled) == [a_req, a_inf, a_done, b_req, c_done]
    assert State.REQUESTED < State.INFLIGHT < State.COMPLETED


def test_instant_ordering_from_real_file_names() -> None:
    names = [
        "20250126060846931.deltacommit",
        "20250126040936578.rollback.requested",
        "20250126040823628.deltacommit.inflight",
        "20250126040936578.rollback",
        "20250126040823628.deltacommit.requested",
        "20250126040823628.deltacommit",
        "20250126040936578.rollback.inflight",
    ]
    ordered = sorted(layout.parse_file_name(n) for n in names)
    assert [layout.file_name(i) for i in ordered] == [
        "20250126040823628.deltacommit.requested",
        "20250126040823628.deltacommit.inflight",
        "20250126040823628.deltacommit",
        "20250126040936578.rollback.requested",
        "20250126040936578.rollback.inflight",
        "20250126040936578.rollback",
        "20250126060846931.deltacommit",
    ]


# -- instant times --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "value",
    [
        "20251301000000000",  # month 13
        "20250230120000000",  # 30 February
        "20250101240000000",  # hour 24
        "20250101006000000",  # minute 60
        "202501010000000",  # 15 digits
        "2025010100000000",  # 16 digits
        "2025010100000",  # 13 digits
        "202501010000000000",  # 18 digits
        "2025-01-01000000000",
        "2025010100000000a",
        "",
        "20250101000000000\n",  # a trailing newline is not part of an instant time
        "\u0662\u0660\u0662\u0665\u0660\u0661\u0660\u0661" + "\u0660" * 6,  # Arabic-Indic digits
    ],
)
def test_validate_instant_time_invalid_raises(value: str) -> None:
    with pytest.raises(InvalidInstantError):
        validate_instant_time(value)
    with pytest.raises(InvalidInstantError):
        Instant(value, State.COMPLETED, Action.COMMIT)


def test_validate_instant_time_non_string_raises() -> None:
    with pytest.raises(InvalidInstantError):
        validate_instant_time(20250101000000000)  # type: ignore[arg-type]


def test_instant_time_valid_values_convert_exactly() -> None:
    assert validate_instant_time("20240229235959999") == "20240229235959999"  # leap day
    assert validate_instant_time("20240707001301") == "20240707001301"
    moment = instant_to_datetime("20240229235959999")
    assert moment == dt.datetime(2024, 2, 29, 23, 59, 59, 999000, tzinfo=dt.timezone.utc)
    assert format_instant(moment) == "20240229235959999"
    assert instant_to_datetime("20240707001301") == dt.datetime(2024, 7, 7, 0, 13, 1, tzinfo=dt.timezone.utc)
    # A non-UTC datetime is converted to UTC.
    plus2 = dt.datetime(2025, 1, 1, 2, 0, 0, 5000, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    assert format_instant(plus2) == "20250101000000005"


# -- clock ----------------------------------------------------------------------------------------
FROZEN = dt.datetime(2025, 3, 31, 23, 59, 59, 990000, tzinfo=dt.timezone.utc)


def test_instant_clock_frozen_now_10000_calls_strictly_increasing_unique() -> None:
    clock = InstantClock(now=lambda: FROZEN)
    times = [clock.next() for _ in range(10_000)]
    assert times[0] == "20250331235959990"
    assert times[10] == "20250401000000000"  # rolls over midnight and month
    assert times[-1] == format_instant(FROZEN + dt.timedelta(milliseconds=9_999)) == "20250401000009989"
    assert all(len(t) == 17 for t in times)
    assert all(a < b for a, b in zip(times, times[1:], strict=False))
    assert len(set(times)) == 10_000
    for t in times[::997]:
        validate_instant_time(t)


def test_instant_clock_after_future_time_returns_next_millisecond() -> None:
    clock = InstantClock(now=lambda: FROZEN)
    assert clock.next(after="20991231235959999") == "21000101000000000"
    # Later calls stay above the future floor even without ``after``.
    assert clock.next() == "21000101000000001"
    assert clock.next(after="20250101000000000") == "21000101000000002"


def test_instant_clock_after_fourteen_digit_time() -> None:
    clock = InstantClock(now=lambda: FROZEN)
    assert clock.next(after="20300101000000") == "20300101000000001"


def test_instant_clock_after_past_time_uses_now() -> None:
    clock = InstantClock(now=lambda: FROZEN)
    assert clock.next(after="20200101000000000") == "20250331235959990"


# -- properties text ------------------------------------------------------------------------------
def test_parse_properties_java_escapes_comments_and_continuations() -> None:
    text = (
        "#Properties saved on 2025-03-31T03:06:42.363296Z\n"
        "! a bang comment=ignored\n"
        "   # an indented comment\n"
        "\n"
        "plain=value\n"
        "colon\\:key=a\\:b\n"
        "eq\\=key=c\\=d\n"
        "sep.colon:value one\n"
        "sep.space   spaced value\n"
        "sep.spaced.equals  =  v2\n"
        "unicode=caf\\u00e9 \\u20ac\n"
        "tabs=a\\tb\\nc\n"
        "continued=first,\\\n"
        "    second,\\\n"
        "\tthird\n"
        "escaped.backslash=ends\\\\\n"
        "after=ok\n"
        "my\\ key=spaced key\n"
        "empty=\n"
        "bare.key\n"
        'schema={"type"\\:"record","name"\\:"r"}\r\n'
        "crlf=yes\r\n"
    )
    assert parse_properties(text) == {
        "plain": "value",
        "colon:key": "a:b",
        "eq=key": "c=d",
        "sep.colon": "value one",
        "sep.space": "spaced value",
        "sep.spaced.equals": "v2",
        "unicode": "café €",
        "tabs": "a\tb\nc",
        "continued": "first,second,third",
        "escaped.backslash": "ends\\",
        "after": "ok",
        "my key": "spaced key",
        "empty": "",
        "bare.key": "",
        "schema": '{"type":"record","name":"r"}',
        "crlf": "yes",
    }


def test_parse_properties_comment_ending_in_backslash_does_not_continue() -> None:
    # Java's Properties.load ends a comment line at its line break, whatever it ends with.
    assert parse_properties("# a comment \\\nkey=value\n! another \\\nk2=v2\n") == {
        "key": "value",
        "k2": "v2",
    }


def test_parse_properties_later_key_wins() -> None:
    assert parse_properties("k=1\nk=2\n") == {"k": "2"}


def _real_properties() -> list[tuple[str, str]]:
    found = []
    for archive in TABLE_ZIPS:
        with zipfile.ZipFile(archive) as zf:
            for member in zf.namelist():
                if member.endswith(".hoodie/hoodie.properties") and not member.startswith("__MACOSX"):
                    found.append((archive.stem, zf.read(member).decode("utf-8")))
    return found


def test_parse_properties_every_real_table_checksum_matches() -> None:
    tables = _real_properties()
    assert len(tables) == 16
    for name, text in tables:
        props = parse_properties(text)
        assert props["hoodie.table.version"] == "6", name
        assert props["hoodie.timeline.layout.version"] == "1", name
        stored = int(props[CHECKSUM_KEY])
        assert table_checksum(props) == stored, name
        expected = zlib.crc32(
            f"{props.get('hoodie.database.name', '')}.{props['hoodie.table.name']}".encode()
        )
        assert stored == expected, name
        # Escaped colons in the create schema come back as plain JSON.
        if "hoodie.table.create.schema" in props:
            assert "\\:" not in props["hoodie.table.create.schema"], name
            assert props["hoodie.table.create.schema"].startswith('{"type":"record"'), name
        config = TableConfig.from_properties(props, name)
        assert config.name == props["hoodie.table.name"]


def test_parse_properties_real_trips_table_exact_values() -> None:
    text = dict(_real_properties())["moravro_v6_trips_8i1u"]
    props = parse_properties(text)
    assert props[CHECKSUM_KEY] == "3843273058"
    assert table_checksum(props) == 3843273058 == zlib.crc32(b"default.v6_trips_8i1u")
    assert props["hoodie.table.create.schema"].startswith(
        '{"type":"record","name":"v6_trips_8i1u_record","namespace":"hoodie.v6_trips_8i1u","fields":['
    )
    config = TableConfig.from_properties(props)
    assert config.table_type is TableType.MERGE_ON_READ
    assert config.record_key_fields == ("uuid",)
    assert config.partition_fields == ("city",)
    assert config.precombine_field == "ts"
    assert config.hive_style is True
    assert config.merge_mode is MergeMode.COMMIT_TIME_ORDERING  # OverwriteWithLatestAvroPayload


def test_table_checksum_spec_example_and_empty_database() -> None:
    assert table_checksum({"hoodie.table.name": "trips"}) == 3761586722
    assert table_checksum({"hoodie.table.name": "trips", "hoodie.database.name": ""}) == 3761586722
    assert table_checksum({"hoodie.table.name": "trips", "hoodie.database.name": "db"}) == zlib.crc32(
        b"db.trips"
    )


NOW = dt.datetime(2025, 3, 31, 3, 6, 42, 363296, tzinfo=dt.timezone.utc)


def test_format_properties_unescaped_sorted_checksum_last() -> None:
    props = {
        "hoodie.table.name": "trips",
        "hoodie.table.create.schema": '{"type":"record","name":"r","fields":[]}',
        "hoodie.table.type": "MERGE_ON_READ",
        "a.url": "s3://bucket/path?x=1",
        CHECKSUM_KEY: "999",  # a stale value is replaced by the computed one
    }
    text = format_properties(props, now=NOW)
    assert text == (
        "#Properties saved on 2025-03-31T03:06:42.363296Z\n"
        "a.url=s3://bucket/path?x=1\n"
        'hoodie.table.create.schema={"type":"record","name":"r","fields":[]}\n'
        "hoodie.table.name=trips\n"
        "hoodie.table.type=MERGE_ON_READ\n"
        "hoodie.table.checksum=3761586722\n"
    )
    assert parse_properties(text) == {**props, CHECKSUM_KEY: "3761586722"}


def test_format_properties_newlines_escaped_and_round_trip() -> None:
    props = {"hoodie.table.name": "t", "multi": "line1\nline2\r\nline3"}
    text = format_properties(props, now=NOW)
    assert "multi=line1\\nline2\\r\\nline3\n" in text
    assert text.count("\n") == 4
    assert parse_properties(text) == {**props, CHECKSUM_KEY: str(zlib.crc32(b".t"))}


def test_format_properties_new_table_properties_round_trip() -> None:
    props = TableConfig.new_properties(
        name="orders",
        table_type=TableType.COPY_ON_WRITE,
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=("region",),
        hive_style=True,
        database="sales",
    )
    parsed = parse_properties(format_properties(props, now=NOW))
    assert parsed == {**props, CHECKSUM_KEY: str(zlib.crc32(b"sales.orders"))}
    config = TableConfig.from_properties(parsed)
    assert config.keygen_class == "org.apache.hudi.keygen.SimpleKeyGenerator"
    assert config.merge_mode is MergeMode.EVENT_TIME_ORDERING
    assert config.is_partitioned and config.hive_style


# -- TableConfig ----------------------------------------------------------------------------------
def _props(**overrides: str | None) -> dict[str, str]:
    props = TableConfig.new_properties(
        name="t", table_type=TableType.MERGE_ON_READ, record_key_fields=("id",), precombine_field="ts"
    )
    for key, value in overrides.items():
        real = key.replace("__", ".")
        if value is None:
            props.pop(real, None)
        else:
            props[real] = value
    return props


@pytest.mark.parametrize("version", ["5", "7", "10", "x"])
def test_table_config_unsupported_version_raises_naming_value(version: str) -> None:
    with pytest.raises(
        UnsupportedTableVersionError, match=f"hoodie.table.version={version} is not supported"
    ):
        TableConfig.from_properties(_props(hoodie__table__version=version), "/x/.hoodie/hoodie.properties")
    with pytest.raises(UnsupportedTableVersionError, match="/x/.hoodie/hoodie.properties"):
        TableConfig.from_properties(_props(hoodie__table__version=version), "/x/.hoodie/hoodie.properties")


@pytest.mark.parametrize("key", ["hoodie.table.name", "hoodie.table.type", "hoodie.table.version"])
def test_table_config_missing_required_key_raises_naming_key(key: str) -> None:
    props = _props()
    del props[key]
    with pytest.raises(TableConfigError, match=f"required property {key} is missing"):
        TableConfig.from_properties(props)
    props[key] = ""
    with pytest.raises(TableConfigError, match=key):
        TableConfig.from_properties(props)


@pytest.mark.parametrize(("layout", "shown"), [("2", "2"), ("0", "0"), (None, "<missing>")])
def test_table_config_layout_version_mismatch_raises(layout: str | None, shown: str) -> None:
    with pytest.raises(
        UnsupportedTableVersionError, match=f"hoodie.timeline.layout.version={shown} must be 1"
    ):
        TableConfig.from_properties(_props(hoodie__timeline__layout__version=layout))


@pytest.mark.parametrize("value", ["true", "TRUE", "True"])
def test_table_config_drop_partition_columns_true_raises(value: str) -> None:
    with pytest.raises(TableConfigError, match="drop.partition.columns=true"):
        TableConfig.from_properties(_props(hoodie__datasource__write__drop__partition__columns=value))


def test_table_config_bad_table_type_and_multiple_ordering_fields_raise() -> None:
    with pytest.raises(TableConfigError, match="'DELTA'"):
        TableConfig.from_properties(_props(hoodie__table__type="DELTA"))
    with pytest.raises(TableConfigError, match="ts,ts2"):
        TableConfig.from_properties(_props(hoodie__table__precombine__field="ts,ts2"))
    with pytest.raises(TableConfigError, match="hoodie.record.merge.mode=CUSTOM"):
        TableConfig.from_properties(_props(hoodie__record__merge__mode="CUSTOM"))


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("cow", TableType.COPY_ON_WRITE),
        ("Merge-On-Read", TableType.MERGE_ON_READ),
        ("MOR", TableType.MERGE_ON_READ),
    ],
)
def test_table_type_parse_aliases(value: str, expected: TableType) -> None:
    assert TableType.parse(value) is expected


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({}, MergeMode.EVENT_TIME_ORDERING),  # Default payload + precombine
        (
            {"hoodie__compaction__payload__class": None},
            MergeMode.EVENT_TIME_ORDERING,
        ),  # no payload + precombine
        ({"hoodie__compaction__payload__class": OVERWRITE_PAYLOAD}, MergeMode.COMMIT_TIME_ORDERING),
        ({"hoodie__table__precombine__field": None}, MergeMode.COMMIT_TIME_ORDERING),  # no ordering field
        ({"hoodie__table__precombine__field": ""}, MergeMode.COMMIT_TIME_ORDERING),
        (
            {"hoodie__record__merge__mode": "COMMIT_TIME_ORDERING"},
            MergeMode.COMMIT_TIME_ORDERING,
        ),  # explicit wins
        (
            {
                "hoodie__record__merge__mode": "event_time_ordering",
                "hoodie__compaction__payload__class": OVERWRITE_PAYLOAD,
            },
            MergeMode.EVENT_TIME_ORDERING,
        ),
        (
            {"hoodie__table__precombine__field": None, "hoodie__table__ordering__fields": "ts"},
            MergeMode.EVENT_TIME_ORDERING,  # the v8 name of the ordering field is honoured too
        ),
    ],
)
def test_table_config_merge_mode_derivation(overrides: dict[str, str | None], expected: MergeMode) -> None:
    props = _props(**overrides)
    if "hoodie.compaction.payload.class" in props:
        assert props["hoodie.compaction.payload.class"] in (DEFAULT_PAYLOAD, OVERWRITE_PAYLOAD)
    assert TableConfig.from_properties(props).merge_mode is expected


def test_table_config_keeps_unknown_keys_and_defaults() -> None:
    props = _props(
        hoodie__custom__key="x",
        hoodie__populate__meta__fields=None,
        hoodie__datasource__write__hive_style_partitioning=None,
    )
    config = TableConfig.from_properties(props)
    assert config.properties["hoodie.custom.key"] == "x"
    assert config.populate_meta_fields is True
    assert config.hive_style is False
    assert config.is_partitioned is False
    assert config.partition_fields == ()


@pytest.mark.parametrize("name", ["", "a=b", "a:b", "a/b", "a\\b", "a\nb"])
def test_table_config_new_properties_bad_name_raises(name: str) -> None:
    with pytest.raises(TableConfigError):
        TableConfig.new_properties(
            name=name, table_type=TableType.COPY_ON_WRITE, record_key_fields=("id",), precombine_field="ts"
        )


@pytest.mark.parametrize(
    "value", ["00000000000000010", "00000000000000011", "00000000000000010001", "00000000000000010010001"]
)
def test_a_v6_mdt_initialised_on_an_empty_table_names_timeline_instants(value: str) -> None:
    """Hudi 0.14/0.15 initialise the MDT of a table with no completed instant at
    ``SOLO_COMMIT_TIMESTAMP`` + ``010`` (and later partitions at ``011``...): no date, but an MDT
    timeline time, suffixed as any other; the layout 1 parser reads its files."""
    assert validate_timeline_time(value) == value
    assert layout.parse_file_name(f"{value}.deltacommit") == Instant(
        value, State.COMPLETED, Action.DELTACOMMIT
    )


@pytest.mark.parametrize("value", ["00000000000000000", "00000000000000009", "00000000000000000001"])
def test_other_all_zero_times_are_still_no_timeline_times(value: str) -> None:
    """Hudi 1.x's ``00000000000000000`` MDT times are read apart (by their file names), not here."""
    with pytest.raises(InvalidInstantError, match="is not a valid date"):
        validate_timeline_time(value)
