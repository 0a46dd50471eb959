"""Rules on infiniband (being written)."""
