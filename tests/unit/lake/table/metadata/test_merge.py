"""How two records of one key in the metadata table combine (``metadata.merge``): Hudi 1.x's
``HoodieMetadataPayload`` per record type."""

from __future__ import annotations

from airflow_lake_provider.lake.table.metadata.merge import combine


def test_the_merge_follows_javas_payload(hudi_table_zip) -> None:
    """A file added then deleted leaves the listing; a deletion of a file the older record lacks
    stays as a tombstone; the larger size wins; a column stats tombstone merged over a live record
    deletes the key; a tight partition stats record replaces the older one; an untight one widens
    the range and adds the counts."""
    older = {
        "type": 2,
        "filesystemMetadata": {"a": {"size": 5, "isDeleted": False}, "b": {"size": 7, "isDeleted": False}},
    }
    newer = {
        "type": 2,
        "filesystemMetadata": {
            "a": {"size": 0, "isDeleted": True},
            "b": {"size": 3, "isDeleted": False},
            "c": {"size": 0, "isDeleted": True},
        },
    }
    assert combine(older, newer, "p")["filesystemMetadata"] == {
        "b": {"size": 7, "isDeleted": False},
        "c": {"size": 0, "isDeleted": True},
    }

    def stats(lo: int, hi: int, count: int, *, deleted: bool = False, tight: bool = False) -> dict:
        wrap = ("org.apache.hudi.avro.model.IntWrapper", {"value": 0})
        return {
            "type": 6,
            "ColumnStatsMetadata": {
                "minValue": (wrap[0], {"value": lo}),
                "maxValue": (wrap[0], {"value": hi}),
                "valueCount": count,
                "nullCount": 0,
                "totalSize": 10,
                "totalUncompressedSize": 20,
                "isDeleted": deleted,
                "isTightBound": tight,
            },
        }

    assert combine(stats(1, 5, 2), stats(0, 0, -1, deleted=True), "k") is None
    assert combine(stats(1, 5, 2), stats(3, 4, 1, tight=True), "k") == stats(3, 4, 1, tight=True)
    widened = combine(stats(1, 5, 2), stats(0, 4, 3), "k")["ColumnStatsMetadata"]
    assert (widened["minValue"][1]["value"], widened["maxValue"][1]["value"]) == (0, 5)
    assert (widened["valueCount"], widened["totalSize"], widened["totalUncompressedSize"]) == (5, 20, 40)
    assert combine(None, stats(1, 2, 1), "k") == stats(1, 2, 1)
    assert combine(stats(1, 2, 1), None, "k") is None
