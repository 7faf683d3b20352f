"""Timeline archival: configuration, the pure planner, and the executor that moves old instants to
``.hoodie/archived/``."""
