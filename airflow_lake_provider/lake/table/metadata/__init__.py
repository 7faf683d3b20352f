"""Hudi's metadata table (MDT): the policy every mutating action applies to it (``policy``), its
records (``records``, ``index``, ``stats``), reading and checking it (``files``, ``merge``), the
deltacommit a maintained action adds (``commit``), and its own services (``services``: ``clean``,
``compaction``, ``archival``)."""
