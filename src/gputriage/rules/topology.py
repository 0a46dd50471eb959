"""Rules on topology (being written)."""
