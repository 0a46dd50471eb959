"""Rules on pcie (being written)."""
