"""Golden verdicts on every category-4 (kernel log) and category-5 (NCCL) capture: the
finding ids that must appear (``id`` or ``id=severity``) and those that must not, read
from MANIFEST.tsv's expected_diagnosis (see golden.py)."""

from __future__ import annotations

import pytest
from golden import CALM, GPU_FAULTS, cases, check_verdict, missing_rows

# sample name part -> (must, must not)
GOLDEN: dict[str, tuple] = {
    # --- 4: kernel logs ---
    "bazzite2668": (("driver.version-mismatch", "driver.gsp-firmware-missing"), ("xid.79",)),
    "bumblebee677": (("xid.31", "xid.32"), ("xid.79", "kernel.pcie-aer")),
    "dalle104": (("driver.version-mismatch=critical",), ("xid.79",)),
    "dxvk1799": (("xid.31",), ("xid.79", "kernel.pcie-aer")),
    "gb10-or-grace": (("xid.119", "xid.120"), ()),
    "gpud-pr1174": (("xid.149=critical", "xid.145"), ()),
    "gpud-pr46": (("xid.13", "xid.109"), ("xid.79",)),
    "gpud-xid119": (("xid.119=critical",), ("kernel.gsp-rpc-timeout",)),
    "gpuop1146": (("driver.gpu-init-failed", "xid.48", "xid.64"), ()),
    "mattshma133": (("driver.no-adapter-probed",), ("driver.version-mismatch",)),
    "nccl2241": (("xid.145",), ("xid.79",)),
    "nolebase-h100-syslog": (("xid.79", "driver.gsp-firmware-missing"), ()),
    "nolebase-h100-xid79": (("xid.79=critical",), ()),
    "nvidiaall394": (("driver.version-mismatch",), ()),
    "nvsentinel-csv": (("xid.149", "xid.74", "xid.13", "xid.69"), ()),
    "nvsentinel155": (("xid.79",), ()),
    "ogkm1030": (("xid.31",), ("xid.79", "kernel.pcie-aer")),
    "ogkm1150": (("xid.45",), ()),
    "ogkm1151": (("driver.gpu-init-failed",), ()),
    "ogkm446-talos": (("kernel.gsp-error",), ()),
    "ogkm789": (("driver.gpu-init-failed",), ()),
    "rtxpro6000-blackwell-xid48": (("xid.48", "xid.63", "xid.154"), ()),
    "rviz-p620": (("xid.13", "xid.43"), ("xid.79",)),
    "sichek51": (("kernel.gpu-reset-required=critical",), ()),
    "stackhpc287": (("driver.version-mismatch",), ()),
    "training-chronicles": (("xid.63",), ("xid.79",)),
    "trtllm15610": (("xid.13",), ("xid.79",)),
    "vllm40652-8xa100": (("xid.119",), ()),
    "vllm40652-talos": (("xid.74", "xid.154"), ()),
    "ikllama485": (("kernel.segfault-in-gpu-library", "xid.31"), ("xid.79", "kernel.pcie-aer")),
    "ubuntuforums-gts250": (("xid.79=critical", "kernel.pcie-aer=info"),
                            ("kernel.segfault-in-gpu-library",)),
    "ikllama381": (("kernel.segfault-in-gpu-library=warning",), ("xid.79",)),
    "aihub0007": (("kernel.link-down=critical",), ("kernel.link-flaps",)),
    "cx6-ocp3-200g-boot-dmesg-link-down-then-up": (
        ("kernel.pcie-bandwidth-limited",),
        ("kernel.link-down", "kernel.link-flaps", "kernel.link-down-at-boot")),
    "cx6-ocp3-200g-boot-dmesg-x4-slot": (
        ("kernel.pcie-bandwidth-limited", "kernel.link-down-at-boot=info"),
        ("kernel.link-down", "kernel.link-flaps")),
    "dcgm144": (("xid.119",), ("kernel.gsp-rpc-timeout",)),
    "ewell-a40": (("xid.119", "driver.gpu-init-failed"), ("kernel.gsp-rpc-timeout",)),
    "gpuop2868": (("kernel.peermem-load-failed=warning",), ("driver.module-load-failed",)),
    "nvpeermemory84": (("kernel.peermem-load-failed=warning",), ("driver.module-load-failed",)),
    "gpuburn1": (("kernel.pcie-aer=critical", "xid.79"), ()),
    "returnn1500": (("kernel.pcie-aer=critical",), ("kernel.segfault-in-gpu-library",)),
    "meta-gcm": (("kernel.link-down=critical",), ()),
    # the VM's firmware left the GPUs' BAR1 unmapped: the platform's configuration
    "gpuop492": (("driver.bar-unmapped=critical",), (*GPU_FAULTS, "driver.probe-failed")),
    # the open module (560's default) refuses a Pascal GPU without GSP: software
    "negativo158": (("driver.gpu-unsupported=critical",),
                    (*GPU_FAULTS, "driver.probe-failed")),
    # a contained double-bit error: reset for the remap; peermem teardown lines are noise
    "gpud-dmesg-iso-xid48": (("xid.48=critical", "xid.63", "xid.94"),
                             ("kernel.peermem-invalid-context=warning",)),
    "gpud-journal-short-iso-a800": ((), (CALM,)),
    # a failing NVMe drive under an md/XFS volume: the node's disk, not its GPUs
    "gcm-dmesg-nvme2n1": (("kernel.storage-error=critical",), GPU_FAULTS),
    # one program faulting at one address on its host engine: the job's stack
    "tinygrad6947": (("xid.31=warning",), ("xid.79", "kernel.pcie-aer", "xid.31=critical")),
    "nvpeermem8": (("kernel.peermem-load-failed=warning",), ("driver.module-load-failed",)),
    # --- 5: NCCL logs ---
    "awsofinccl715": ((), ("nccl.socket-transport", "nccl.warn")),
    "detectron4730": (("nccl.socket-transport",), ()),
    "gke-gvnic": (("nccl.socket-transport=info",), ()),
    "vastai-4xa100-shm": (("nccl.shm-transport",), ()),
    "nccl1189": ((), ("nccl.gdr-disabled", "nccl.socket-transport", "nccl.warn")),
    "nccl1405": (("nccl.ib-completion-error",), ()),
    "nccl1412": ((), ("nccl.init-incomplete", "nccl.warn")),
    # one node without IB: sockets are not the story; the excerpt's evidence of the GPU
    # problem is NCCL 2.25.1+cuda12.2 not fitting the RTX 5090's shared memory
    "nccl1637": (("nccl.shared-mem-exceeded=warning",), ("nccl.socket-transport",)),
    "nccl1657": (("nccl.gdr-disabled",), ("nccl.socket-transport",)),
    "nccl1814": (("nccl.ib-completion-error",), ()),
    "nccl1817": ((), ("nccl.socket-transport", "nccl.warn")),
    "nccl2345-after": (("nccl.gdr-disabled",), ()),
    "nccl2345-h200": (("nccl.node-split",), ()),
    "nccl2428": (("nccl.device-open-failed",), ()),
    "nccl398": (("nccl.socket-transport",), ()),
    "nccl928": (("nccl.ib-completion-error",), ()),
    "nccl952": (("nccl.socket-transport", "nccl.warn"), ()),
    "nccltests188": (("nccl.socket-transport",), ()),
    "nccltests264-all-reduce": (("nccl.tests-failed=critical",), ()),
    "nvpeermem56": (("nccl.gdr-disabled",), ()),
    "rtxpro6000-dbe": (("nccl.watchdog-timeout",), ()),
    "vllm-k8s": ((), ("nccl.gdr-disabled", "nccl.socket-transport")),
    "gb300-nvl72-72gpu-mnnvl": (("nccl.nvls-failed",), ("nccl.warn",)),
    "nccl2057": (("nccl.p2p-disabled=warning",), ("nccl.socket-transport",)),
    "nccl1788": (("nccl.nvls-failed=critical",), ("nccl.warn",)),
    "pie500": (("nccl.nvls-failed=warning",), ("nccl.warn",)),
    # healthy nccl-tests sweeps over AWS EFA (p5) and RoCE (DGX-1, SR-IOV VFs)
    "awsome-dt-2x-p5": ((), (CALM, "nccl.busbw-low")),
    "awsome-dt-aws-batch-p5": ((), (CALM, "nccl.busbw-low")),
    "deepops-roce-k8s": ((), (CALM, "nccl.busbw-low")),
    # Azure VMs outside one IB partition: the cloud's configuration, no drain
    "mleng-azure-2node": (("nccl.ib-completion-error=warning",),
                          (*GPU_FAULTS, "nccl.ib-completion-error=critical")),
    # the peer node refused: that node, not this one and not the job
    "mleng-slurm-jeanzay": (("nccl.peer-connect-failed=warning",), (*GPU_FAULTS, "nccl.warn")),
    # NVLS multicast: the fabric manager's state on the node, not the job, not hardware
    "nccl1338": (("nccl.nvls-failed=warning",), (*GPU_FAULTS, "nccl.warn")),
    "nccltests276": (("nccl.nvls-failed=critical",), (*GPU_FAULTS, "nccl.warn")),
    "pytorch177472": (("nccl.nvls-failed=critical",), (*GPU_FAULTS, "nccl.warn")),
    "awsomeai203": (("nccl.ofi-register-failed=warning",), (*GPU_FAULTS, "nccl.warn")),
    "nccl210": (("nccl.no-socket-interface=warning",), (*GPU_FAULTS, "nccl.warn")),
    # one NCCL_SOCKET_IFNAME for two hosts whose NICs differ: the job's settings
    "nccltests219": (("nccl.tests-failed=warning",),
                     (*GPU_FAULTS, "nccl.tests-failed=critical")),
}


@pytest.mark.parametrize(("part", "must", "must_not"), list(cases(GOLDEN)))
def test_golden_verdict(corpus, analysed, part, must, must_not):
    check_verdict(analysed, corpus, part, must, must_not)


def test_every_category_4_and_5_sample_has_a_golden_row(corpus):
    assert not missing_rows(corpus, GOLDEN, ("4", "5"))
