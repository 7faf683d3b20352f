"""Clean: configuration, the pure planner, and the executor that deletes what a plan names."""
