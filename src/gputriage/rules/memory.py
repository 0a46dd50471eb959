"""Rules on memory (being written)."""
