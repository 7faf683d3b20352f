"""Table services that plan over a table and act on it: clean, compaction, savepoints."""
