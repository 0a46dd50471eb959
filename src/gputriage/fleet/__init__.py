"""Many nodes at once: walking a fleet's snapshots or results, the report across
nodes, and the simulated fleet of the scenarios."""
