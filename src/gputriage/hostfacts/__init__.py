"""Facts of one hardware area each (topology, PCIe, fabric, InfiniBand, host
configuration), registered with :func:`gputriage.facts.fact`. Importing this
package registers them all; :meth:`gputriage.facts.Facts.get` does so on
first need."""

from gputriage.hostfacts import (  # noqa: F401
    fabric,
    host,
    infiniband,
    nccl,
    nccl_bandwidth,
    pcie,
    topology,
)
