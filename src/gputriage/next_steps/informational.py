"""The finding ids that only report: a state that is fine (``*-ok``, ``*-seen``), a layout
or a figure worth knowing, or a doubt the finding itself spells out. Their rules never
give them an action, so they take no next step; a test holds every finding of the
scenarios and the corpus with one of these ids to action ``none``. An id that may ask
for an action belongs in a repair table instead (next_steps/repairs.py)."""

from __future__ import annotations

__all__ = ["REPORT_ONLY"]

REPORT_ONLY = frozenset({
    # healthy states
    "container.cdi-spec-current", "container.ctk-configured", "container.runtime-configured",
    "container.toolkit-sees-gpus", "cuda.device-query-ok", "cuda.gpu-found",
    "dcgm.diag-passed", "dcgm.exporter-running", "dcgm.gpus-seen", "dcgm.health-ok",
    "dcgm.metrics-healthy", "dcgm.nvlink-up", "driver.versions-consistent", "gpu.count-ok",
    "gpu.reset-done", "k8s.gpus-advertised", "k8s.mig-config-applied",
    "k8s.plugin-registered", "weights.local-read",
    # layouts, figures and settings worth knowing
    "container.runtime-default-not-nvidia", "gdrcopy.bandwidth", "gpu.passthrough",
    "host.cgroup-v1", "host.container", "host.not-gpu-host", "hugepages.thp",
    "k8s.mig-resources", "mig.layout", "module.display-modules-absent", "topology.map",
    "topology.numa-layout", "weights.overlay-image", "weights.ram-short",
    "xid-counts.job-signature", "xid-counts.spread",
    # counts to watch, harmless messages, what could not be told (the finding says why)
    "dcgm.ecc-correctable-high", "memory.correctable-high", "kernel.peermem-invalid-context",
    "tegra.production-mode", "dcgm.health-unchecked", "dcgm.no-result",
    "expect.gpu-count-unknown", "expect.unchecked", "gdrcopy.tests-failed",
    "ib.link-state-unshown", "imex.daemon-errors", "nvidia-smi.error",
})
