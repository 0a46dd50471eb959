"""Rules on hostcfg (being written)."""
