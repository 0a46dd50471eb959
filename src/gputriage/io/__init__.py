"""Opening inputs: files, folders, FIFOs and standard input read within bounds,
compressed ones decompressed, JSON parsed within limits, network reads under a deadline;
large files read by forked worker processes (``forkpool``)."""
