"""``hoodie.properties`` of table versions 8 and 9: the keys Hudi 1.x added, and what is refused."""

from __future__ import annotations

import pytest

from airflow_lake_provider.lake.errors import TableConfigError, UnsupportedTableVersionError
from airflow_lake_provider.lake.format.table_config import (
    COMPLEX_KEYGEN,
    NONPARTITIONED_KEYGEN,
    SIMPLE_KEYGEN,
    MergeMode,
    TableConfig,
)

SOURCE = "/t/.hoodie/hoodie.properties"


def _v9(**overrides: str | None) -> dict[str, str]:
    """A v9 property set as Hudi 1.1's Spark writer leaves it (cf. tests/data/hudi-tables-1x)."""
    props = {
        "hoodie.table.name": "t",
        "hoodie.table.type": "MERGE_ON_READ",
        "hoodie.table.version": "9",
        "hoodie.table.initial.version": "9",
        "hoodie.timeline.layout.version": "2",
        "hoodie.timeline.path": "timeline",
        "hoodie.timeline.history.path": "history",
        "hoodie.table.recordkey.fields": "txn_id",
        "hoodie.table.ordering.fields": "txn_ts",
        "hoodie.table.partition.fields": "region",
        "hoodie.table.keygenerator.type": "SIMPLE",
        "hoodie.record.merge.mode": "EVENT_TIME_ORDERING",
        "hoodie.table.format": "native",
    }
    for key, value in overrides.items():
        real = key.replace("__", ".")
        if value is None:
            props.pop(real, None)
        else:
            props[real] = value
    return props


@pytest.mark.parametrize(("version", "layout"), [("6", "1"), ("8", "2"), ("9", "2")])
def test_versions_6_8_9_open_with_their_layout(version: str, layout: str) -> None:
    config = TableConfig.from_properties(
        _v9(hoodie__table__version=version, hoodie__timeline__layout__version=layout), SOURCE
    )
    assert config.table_version == int(version)


@pytest.mark.parametrize(("version", "layout"), [("8", "1"), ("9", None), ("6", "2")])
def test_layout_that_does_not_fit_the_version_refused(version: str, layout: str | None) -> None:
    with pytest.raises(
        UnsupportedTableVersionError,
        match=rf"{SOURCE}: hoodie\.timeline\.layout\.version={layout or '<missing>'} must be "
        rf"{1 if version == '6' else 2} for table version {version}",
    ):
        TableConfig.from_properties(
            _v9(hoodie__table__version=version, hoodie__timeline__layout__version=layout), SOURCE
        )


def test_v9_keys_parsed() -> None:
    config = TableConfig.from_properties(_v9(), SOURCE)
    assert config.precombine_field == "txn_ts"  # hoodie.table.ordering.fields replaces the precombine field
    assert config.merge_mode is MergeMode.EVENT_TIME_ORDERING
    assert config.keygen_class == SIMPLE_KEYGEN
    assert config.partition_fields == ("region",)
    commit_time = TableConfig.from_properties(_v9(hoodie__record__merge__mode="COMMIT_TIME_ORDERING"), SOURCE)
    assert commit_time.merge_mode is MergeMode.COMMIT_TIME_ORDERING


@pytest.mark.parametrize(
    ("keygen_type", "keygen_class", "partitioned"),
    [
        ("SIMPLE", SIMPLE_KEYGEN, True),
        ("COMPLEX", COMPLEX_KEYGEN, True),
        ("NON_PARTITION", NONPARTITIONED_KEYGEN, False),
    ],
)
def test_keygenerator_type_stands_for_its_class(
    keygen_type: str, keygen_class: str, partitioned: bool
) -> None:
    config = TableConfig.from_properties(_v9(hoodie__table__keygenerator__type=keygen_type), SOURCE)
    assert (config.keygen_class, config.is_partitioned) == (keygen_class, partitioned)
    # An explicit class (version 6's key) wins.
    both = _v9(hoodie__table__keygenerator__type=keygen_type, hoodie__table__keygenerator__class="x.Y")
    assert TableConfig.from_properties(both, SOURCE).keygen_class == "x.Y"


def test_custom_keygen_partition_field_types_dropped() -> None:
    config = TableConfig.from_properties(
        _v9(
            hoodie__table__keygenerator__type="CUSTOM",
            hoodie__table__partition__fields="region:SIMPLE,day:TIMESTAMP",
        ),
        SOURCE,
    )
    assert config.partition_fields == ("region", "day")


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("hoodie.record.merge.mode", "CUSTOM", "hoodie.record.merge.mode=CUSTOM is not supported"),
        (
            "hoodie.table.partial.update.mode",
            "IGNORE_DEFAULTS",
            "partial.update.mode=IGNORE_DEFAULTS is not supported",
        ),
        (
            "hoodie.table.partial.update.mode",
            "FILL_UNAVAILABLE",
            "partial.update.mode=FILL_UNAVAILABLE is not supported",
        ),
        ("hoodie.table.base.file.format", "LANCE", "hoodie.table.base.file.format=LANCE is not supported"),
        ("hoodie.table.base.file.format", "ORC", "hoodie.table.base.file.format=ORC is not supported"),
        ("hoodie.table.keygenerator.type", "MINE", "hoodie.table.keygenerator.type=MINE is not supported"),
        ("hoodie.table.ordering.fields", "a,b", r"more than one ordering field \(a,b\)"),
        ("hoodie.timeline.path", "../x", "hoodie.timeline.path='../x' is not a folder name"),
        ("hoodie.timeline.history.path", "a/b", "hoodie.timeline.history.path='a/b' is not a folder name"),
    ],
)
def test_unsupported_1x_features_refused_by_name(key: str, value: str, message: str) -> None:
    with pytest.raises(TableConfigError, match=rf"^{SOURCE}: .*{message}"):
        TableConfig.from_properties({**_v9(), key: value}, SOURCE)


@pytest.mark.parametrize("value", ["NONE", "none", ""])
def test_partial_update_mode_none_accepted(value: str) -> None:
    TableConfig.from_properties(_v9(hoodie__table__partial__update__mode=value), SOURCE)


def test_parquet_base_format_accepted() -> None:
    TableConfig.from_properties(_v9(hoodie__table__base__file__format="PARQUET"), SOURCE)
