"""Rules on fabric (being written)."""
