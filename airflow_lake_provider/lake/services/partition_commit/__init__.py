"""Partition commit (Flink filesystem connector semantics): config, time extraction, the pure planner,
durable commit state, and the executor that applies the commit policies."""
