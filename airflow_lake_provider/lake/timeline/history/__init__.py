"""The archived timeline of Hudi 1.x tables (timeline layout 2): an LSM tree of parquet files under
``.hoodie/timeline/history/``, with manifests naming the files of each snapshot and ``_version_``
naming the latest snapshot (``layout``); its rows (``records``), read lazily (``reader``) and
written, compacted and cleaned as Hudi does (``writer``)."""
