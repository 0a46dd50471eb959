"""Rules on thermal (being written)."""
