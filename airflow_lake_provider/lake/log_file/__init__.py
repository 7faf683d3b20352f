"""Hudi log files: the block framing, the data and delete blocks, and reading them back."""
