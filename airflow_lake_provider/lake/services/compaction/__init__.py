"""Compaction: configuration, strategies, the pure planner, plans, and the executor."""
