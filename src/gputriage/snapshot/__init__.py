"""A snapshot: the sources of one host as collected or pasted, read back (`bundle`) within
its budgets, from a folder or a tarball, and written (`writer`) with secrets redacted."""
