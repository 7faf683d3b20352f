"""``hoodie.properties``' boolean flags read by the one boolean parser, and a metadata table's version."""

from __future__ import annotations

import pytest

from airflow_lake_provider.lake.errors import TableConfigError
from airflow_lake_provider.lake.format.partitioning import field_prefixed_keys
from airflow_lake_provider.lake.format.table_config import COMPLEX_KEYGEN, TableConfig, TableType

SOURCE = "/t/.hoodie/hoodie.properties"
HIVE = "hoodie.datasource.write.hive_style_partitioning"
META = "hoodie.populate.meta.fields"
DROP = "hoodie.datasource.write.drop.partition.columns"
BARE = "hoodie.write.complex.keygen.new.encoding"


def _props() -> dict[str, str]:
    return TableConfig.new_properties(
        name="t", table_type=TableType.COPY_ON_WRITE, record_key_fields=("id",), precombine_field="ts"
    )


@pytest.mark.parametrize(
    ("raw", "hive", "meta"), [("true", True, True), ("FALSE", False, False), (" True ", True, True)]
)
def test_flags_read_true_and_false_in_any_case(raw: str, hive: bool, meta: bool) -> None:
    config = TableConfig.from_properties({**_props(), HIVE: raw, META: raw}, SOURCE)
    assert (config.hive_style, config.populate_meta_fields) == (hive, meta)


def test_an_empty_flag_is_its_default() -> None:
    config = TableConfig.from_properties({**_props(), HIVE: "", META: " "}, SOURCE)
    assert (config.hive_style, config.populate_meta_fields) == (False, True)


@pytest.mark.parametrize("key", [HIVE, META, DROP])
@pytest.mark.parametrize("raw", ["yes", "1", "no"])
def test_a_flag_that_is_not_true_or_false_is_refused_naming_the_file(key: str, raw: str) -> None:
    """Once read as false (``hive_style_partitioning=yes`` opened as non-hive-style)."""
    with pytest.raises(TableConfigError) as caught:
        TableConfig.from_properties({**_props(), key: raw}, SOURCE)
    assert str(caught.value) == f"{SOURCE}: {key}={raw!r} is not true or false"


def test_dropped_partition_columns_are_refused_however_true_is_spelled() -> None:
    with pytest.raises(TableConfigError) as caught:
        TableConfig.from_properties({**_props(), DROP: "TRUE"}, SOURCE)
    assert str(caught.value) == f"{SOURCE}: {DROP}=true is not supported"


def test_the_complex_keygens_bare_encoding_flag_is_read_by_the_same_parser() -> None:
    complex_keygen = {**_props(), "hoodie.table.keygenerator.class": COMPLEX_KEYGEN}
    assert field_prefixed_keys(TableConfig.from_properties(complex_keygen, SOURCE)) is True
    assert (
        field_prefixed_keys(TableConfig.from_properties({**complex_keygen, BARE: " TRUE"}, SOURCE)) is False
    )
    with pytest.raises(TableConfigError) as caught:
        field_prefixed_keys(TableConfig.from_properties({**complex_keygen, BARE: "yes"}, SOURCE))
    assert str(caught.value) == f"{SOURCE}: {BARE}='yes' is not true or false"


def test_a_metadata_tables_version_that_is_not_a_number_is_refused_naming_the_file() -> None:
    mdt = "/t/.hoodie/metadata/.hoodie/hoodie.properties"
    assert TableConfig.of_metadata_table({"hoodie.table.version": "8"}, mdt).table_version == 8
    for raw in ("six", "\u00b2", "9" * 5000):  # a superscript two is a digit to str.isdigit, not to int()
        with pytest.raises(TableConfigError) as caught:
            TableConfig.of_metadata_table({"hoodie.table.version": raw}, mdt)
        assert str(caught.value) == f"{mdt}: hoodie.table.version={raw!r} is not a whole number"


@pytest.mark.parametrize("raw", ["\u00b2", "9" * 5000, "6.0"])
def test_a_data_tables_version_that_is_not_a_plain_number_is_refused_naming_the_file(raw: str) -> None:
    with pytest.raises(TableConfigError) as caught:
        TableConfig.from_properties({**_props(), "hoodie.table.version": raw}, SOURCE)
    assert str(caught.value) == (
        f"{SOURCE}: hoodie.table.version={raw} is not supported (only table versions 6, 8 and 9)"
    )
