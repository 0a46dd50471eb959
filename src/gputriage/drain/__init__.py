"""Unattended drains at fleet scale: the envelope every recipe honours before it drains
a Slurm node or cordons a Kubernetes Node (docs/unattended.md).

:mod:`.policy` is the pure decision (kill switch, observe-only, allow-list, a per-hour
rate and a fleet fraction); :mod:`.slurm` and :mod:`.k8s` read the fleet and act;
:mod:`.guard` puts them together (claim, confirm, give back what overflows)."""
