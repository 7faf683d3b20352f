"""The iteration order of a Java ``HashMap`` (``format.java_map``), against orders Java wrote."""

from __future__ import annotations

from airflow_lake_provider.lake.format.java_map import JavaHashMap, string_hash, table_size_for


def test_string_hash_is_javas() -> None:
    assert string_hash("") == 0
    assert string_hash("a") == 97
    assert string_hash("hello") == 99162322  # "hello".hashCode()
    assert string_hash("polygenelubricants") == (-(2**31)) & 0xFFFFFFFF  # Integer.MIN_VALUE


def test_table_sizes() -> None:
    assert [table_size_for(n) for n in (0, 1, 3, 6, 8, 9)] == [1, 1, 4, 8, 8, 16]


def test_the_order_java_wrote_an_all_partitions_map_in() -> None:
    """Hudi 1.1's compacted ``__all_partitions__`` record of the v9 test tables lists its
    partitions as eu, us, apac: buckets 4, 10 and 13 of a 16-slot table."""
    for order in (["region=apac", "region=us", "region=eu"], ["region=eu", "region=apac", "region=us"]):
        m: JavaHashMap[int] = JavaHashMap()
        for key in order:
            m.put(key, 0)
        assert [k for k, _ in m.items()] == ["region=eu", "region=us", "region=apac"]


def test_resizes_keep_insertion_order_within_a_bucket_and_merge_removes() -> None:
    m: JavaHashMap[int] = JavaHashMap(2)
    for i in range(20):
        m.put(f"k{i}", i)
    assert sorted(k for k, _ in m.items()) == sorted(f"k{i}" for i in range(20))
    m.merge("k3", 0, lambda old, new: None)
    m.merge("k4", 1, lambda old, new: old + new)
    items = dict(m.items())
    assert "k3" not in items and items["k4"] == 5
