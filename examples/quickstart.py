"""Quick start (placeholder until the real one is written)."""

print("TODO")
