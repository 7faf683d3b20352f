"""``cast_exact``: batch values cast to the table's types only where every value fits exactly."""

from __future__ import annotations

import pyarrow as pa
import pytest

from airflow_lake_provider.lake.errors import SchemaError
from airflow_lake_provider.lake.format.casting import cast_exact


def test_cast_exact_nested_sliced_and_null_parents() -> None:
    struct = pa.array([{"a": 1.5}, None, {"a": 1e300}], pa.struct([("a", pa.float64())])).slice(0, 2)
    out = cast_exact(struct, pa.struct([pa.field("a", pa.float32(), False)]), "s")
    assert out.to_pylist() == [{"a": 1.5}, None]
    lists = pa.array([[0.1], None, [], [0.5, None]], pa.list_(pa.float64())).slice(1)
    assert cast_exact(lists, pa.large_list(pa.float32()), "l").to_pylist() == [None, [], [0.5, None]]
    maps = pa.array([[("x", 0.1)], [("y", 2.0)]], pa.map_(pa.string(), pa.float64()))
    assert cast_exact(maps.slice(1), pa.map_(pa.string(), pa.float32()), "m").to_pylist() == [[("y", 2.0)]]
    with pytest.raises(SchemaError, match=r"column 'm.value': value 0.1 does not fit float"):
        cast_exact(maps, pa.map_(pa.string(), pa.float32()), "m")
    with pytest.raises(SchemaError, match=r"column 'i': value 2147483648 does not fit int32"):
        cast_exact(pa.array([1, 2**31], pa.int64()), pa.int32(), "i")
    with pytest.raises(SchemaError, match=r"column 't': value .* does not fit timestamp\[us"):
        cast_exact(pa.array([1_001], pa.timestamp("ns")), pa.timestamp("us"), "t")
