"""Hudi's HashID: XXH64 against the specification's test vectors, and the MDT keys it builds
against keys Hudi wrote (``mor_avro_v9_txns_simple_meta``)."""

from __future__ import annotations

from airflow_lake_provider.lake.format.hash_id import column_stats_key, partition_stats_key, xxh64


def test_xxh64_vectors_short_and_long_inputs() -> None:
    assert xxh64(b"", 0) == 0xEF46DB3751D8E999
    assert xxh64(b"abc", 0) == 0x44BC2CF5AD770999
    assert xxh64(b"Nobody inspects the spammish repetition", 0) == 0xFBCEA83C8A378BF1  # >= 32 bytes


def test_keys_are_the_ones_hudi_wrote() -> None:
    name = "3e93c8a9-fda0-4e8a-91dc-b4ade7dab76d-0_1-27-53_20260307162557587.parquet"
    assert (
        column_stats_key("fee_amount", "region=us", name)
        == "5RNSbpYG6oU=431THTTwO5Q=F01d3NbdD9QcFpSCtykrRA=="
    )
    assert partition_stats_key("txn_date", "region=us") == "rpc04bPLuAM=431THTTwO5Q="
    assert partition_stats_key("fee_amount", "region=apac") == "5RNSbpYG6oU=OOL0+QGXAHU="
