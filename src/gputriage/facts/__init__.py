"""Facts: typed views of a snapshot, one area a module, built lazily by `store.Facts`
from the builders `registry` lists; the check's context and its kernel-log window."""
