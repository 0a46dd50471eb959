"""``gputriage watch``: the check run every interval, its last result served to
Prometheus (``/metrics``), node_exporter's textfile collector, node-problem-detector
and the Node's conditions."""
