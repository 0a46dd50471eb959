"""Facts of one hardware area each (topology, PCIe, fabric, InfiniBand, host
configuration), registered with :func:`gputriage.facts.fact` and imported by
the rules that use them."""
