"""Golden verdicts on every category-9 (Kubernetes), category-10 (DCGM) and category-11
(CUDA and container errors) capture, stating what gputriage says of each today against
MANIFEST.tsv's expected diagnosis (row kinds: see golden.py).

Most of these inputs are not read yet: issue 16 brings the job's CUDA/NVML/container
errors, issue 17 Kubernetes, issue 18 DCGM. Their rows assert today's clean refusal and
name the issue, so that they fail, saying so, when it lands. Samples read in part pin
today's verdict the same way; samples judged in full say which findings must (not)
appear.
"""

from __future__ import annotations

import pytest
from declared import golden_tables
from golden import CALM, GPU_FAULTS, Partial, Refused, check_row, missing_rows

CUDA, K8S, DCGM = 16, 17, 18

NVML_LIB = "container.nvml-library-not-found"
CALM_GPUS = (CALM, *GPU_FAULTS)
CALM_DCGM = (*CALM_GPUS, "dcgm.test-failed", "dcgm.pcie-failed")  # no GPU blamed by the diag

GOLDEN: dict[str, tuple | Partial | Refused] = {
    # --- 9: Kubernetes (describe node/pod, device plugin, GPU operator, schedulers) ---
    # nodes (rules/k8s_nodes.py): what each advertises against what it should have
    "cluster-gpu-table-half-nodes-zero": (("k8s.gpus-not-advertised=critical",), CALM_GPUS),
    "describe-node-alpha-nvidia-gpu-taint": (("k8s.gpus-not-advertised=critical",), CALM_GPUS),
    # a lone node with no NVIDIA resource: "if it has GPUs", and what would tell
    "describe-node-gke-no-gpu-capacity": (("k8s.gpus-not-advertised=warning",), CALM_GPUS),
    "describe-node-no-gpu-capacity-docker": (("k8s.gpus-not-advertised=warning",), CALM_GPUS),
    # HAMi's handshake still Requesting: its device plugin on the node does not answer
    "hami314-describe-node": (("k8s.gpus-not-advertised=warning",), CALM_GPUS),
    "allocatable-gpu-and-mig-mixed-rke2": (("k8s.mig-resources=info",), CALM_GPUS),
    "gfd-mig-mixed-labels-a100": (("k8s.mig-resources=info",), CALM_GPUS),
    # Xid 31 is the application's: the job's, the condition to clear, no hardware repair
    "gke-node-condition-xidcriticalerror-31": (("k8s.node-condition=warning",),
                                               (*CALM_GPUS, "k8s.gpus-not-advertised")),
    "lambda-kubeai-doc-gfd-node-labels": (("k8s.gpus-advertised=ok", "k8s.operator-upgrade=ok"),
                                          (*CALM_GPUS, "k8s.driver-drift")),
    # pending pods (rules/k8s_pending.py): why each waits
    "aks-spot-gpu-describe-pod": (("k8s.pending-insufficient-gpu=info",),
                                  (*CALM_GPUS, "k8s.gpus-not-advertised")),
    "devplugin283-openshift": (("k8s.pending-selector-mismatch=warning",),
                               (*CALM_GPUS, "k8s.pending-insufficient-gpu")),
    "devplugin430-describe-pod-pending": (("k8s.pending-insufficient-gpu=warning",), CALM_GPUS),
    # read: Insufficient on the GPU node, the other node cordoned; that the kubelet lost the
    # plugin's endpoint (its journal line, cut short in the paste) is not read
    # the kubelet lost the plugin's endpoint: the node offers no GPU (config, not hardware)
    "failedscheduling-insufficient-gpu-unschedulable": (
        ("k8s.plugin-unregistered=warning", "k8s.pending-insufficient-gpu"), CALM_GPUS),
    "failedscheduling-pod-affinity": (("k8s.pending-affinity=warning",),
                                      (*CALM_GPUS, "k8s.pending-insufficient-gpu")),
    "kueue-pending-resource-unavailable": (("k8s.pending-queue=warning",), CALM_GPUS),
    "volcano-gang-notenoughresources": (("k8s.gang-unschedulable=warning",), CALM_GPUS),
    # the GPU stack (rules/k8s_stack.py, k8s_operator.py; tests/test_rules_k8s_stack.py)
    "devplugin-2020-legacy-log": (("k8s.plugin-registered=ok",), (*CALM_GPUS, NVML_LIB)),
    "devplugin-v0.14.0-klog-healthy": (("k8s.plugin-registered=ok",), CALM_GPUS),
    "device-plugin-registered-ok-mig-single": (("k8s.plugin-registered=ok",), CALM_GPUS),
    "openshift-devplugin-0.13.0": (("k8s.plugin-registered=ok", "k8s.gpus-advertised=ok"),
                                   CALM_GPUS),
    "devplugin182-microk8s": (("k8s.plugin-nvml-missing=warning",),
                              (*CALM_GPUS, NVML_LIB, "k8s.plugin-no-nvml-platform")),
    "devplugin303-failed-to-initialize-nvml": (("k8s.plugin-nvml-missing=warning",),
                                               (*CALM_GPUS, NVML_LIB)),
    "device-plugin-non-nvml-platform-eks": (("k8s.plugin-nvml-missing=warning", NVML_LIB),
                                            (*CALM_GPUS, "k8s.plugin-no-nvml-platform")),
    "device-plugin-jetson-nano": (("k8s.plugin-no-nvml-platform=warning",),
                                  (*CALM_GPUS, "k8s.plugin-nvml-missing", NVML_LIB)),
    "k3s-devplugin-incompatible-strategy": (("k8s.plugin-incompatible-strategy=warning",),
                                            CALM_GPUS),
    "minikube-docker-driver-devplugin": (("k8s.plugin-incompatible-strategy=warning",),
                                         CALM_GPUS),
    "gpu-operator-driver-centos7-kernel-862": (("k8s.operator-driver-failed=critical",),
                                               CALM_GPUS),
    "gpu-operator-driver-could-not-resolve-kernel": (
        ("k8s.operator-driver-failed=critical", "k8s.operator-operand-failing"), CALM_GPUS),
    "gpu-operator-ds-driver-daemonset-0-ready": (("k8s.operator-driver-failed=warning",),
                                                 CALM_GPUS),
    "gpu-operator-toolkit-validation": (
        ("k8s.operator-validation-stuck=warning", "k8s.operator-operand-failing"), CALM_GPUS),
    "openshift-cuda-validator-init-error": (("k8s.operator-validation-stuck=warning",),
                                            CALM_GPUS),
    "gpu-operator-driver-upgrade-node-events": (("k8s.operator-upgrade=ok",), CALM_GPUS),
    # error 35 under a driver (550, CUDA 12.4) that runs every 12.x build: the pod got no driver
    "fasterwhisper1259": (("cuda.driver-unseen=warning",),
                          (CALM, *GPU_FAULTS, "cuda.driver-too-old")),
    # the GPU feature discovery pod's hook: NVML fails on the host (a GPU off the bus)
    "gpud-sxid-readme-gfd-containerd": (("container.hook-nvml-error=critical",),
                                        ("container.hook-failed",)),
    # crictl info: the running nvidia runtime (SystemdCgroup true) is not the edited file's
    "k3s-crictl-info-systemdcgroup": (("container.cri-config-not-loaded=warning",), CALM_GPUS),
    # Caffe's error 35: the driver is older than the image's CUDA (its version not printed)
    "nvdocker747-k80-caffe": (("cuda.driver-too-old=warning",), (CALM, *GPU_FAULTS)),
    # new captures (corpus rows 290-296, 322-338): the device plugin and the kubelet
    # a Kepler GeForce NVML cannot watch for Xids: the old plugin's fault, not the GPU's
    "devplugin33-gtx760": (("k8s.plugin-healthcheck-unsupported=warning",), CALM_GPUS),
    # the kubelet's GetPreferredAllocation on a lost GPU folds under nvidia-smi's lost GPU
    "devplugin231-getpreferredallocation": (("nvidia-smi.gpu-lost=critical",
                                             "k8s.allocate-gpu-lost"), (CALM,)),
    # the plugin's link information fails on the GPU that fell off the bus (Xid 79)
    "devplugin2038-xid79-rtx5090": (("k8s.allocate-gpu-lost=critical",), (CALM,)),
    # a workload took the GPU before the operator's plugin validator: a race, not the GPU
    "gpuop233-device-plugin-validator": (("k8s.allocate-devices-unavailable=warning",),
                                         CALM_GPUS),
    # the labels of a healthy MIG-mixed H100 (mig.config.state=success)
    "gpuopdocs-gfd-node-labels-h100": (("k8s.mig-config-applied=ok", "k8s.gpus-advertised=ok"),
                                       CALM_GPUS),
    # the plugin's start up to its registration (non-Tegra: information), then capacity 1
    "aks-gpuoperator-device-plugin-migsingle": (("k8s.plugin-registered=ok",), CALM_GPUS),
    # two containers of one pod share one ResourceClaim: one GPU, printed twice
    "dradriver-readme-gpu-test2": ((), CALM_GPUS),
    # the GPU operator: its driver pod restarting behind the operands waiting in Init
    "gpuopdocs-operands-stuck-init": (("k8s.operator-driver-failed=warning",
                                       "k8s.operator-validation-stuck",
                                       "k8s.operator-operand-failing"), CALM_GPUS),
    # nvidia-smi exits 14 for a corrupted infoROM: replace the GPU
    "gpuopdocs-driver-validation-p100": (("nvidia-smi.inforom-corrupted=warning",), ()),
    "gpuopdocs-validator-failedcreatepodsandbox": (("container.unknown-runtime=warning",),
                                                   CALM_GPUS),
    # the device plugin disabled: plugin validation waits for a GPU nothing advertises
    "gpuop486-plugin-validation": (("k8s.operator-validation-stuck=warning",), CALM_GPUS),
    # the MIG manager and mig-parted: a GPU it does not know "applied successfully"
    "hami2131-mig-parted-rtxpro6000": (("k8s.mig-unknown-device=warning",),
                                       (*CALM_GPUS, "k8s.mig-config-applied")),
    "gpuop603-mig-manager-mode-change": (("k8s.mig-config-applied=ok",), CALM_GPUS),
    # the driver gone after a reboot: the driver's software, not a GPU
    "gkeaccel61-after-reboot": (("nvidia-smi.cannot-communicate=critical",), GPU_FAULTS),
    # KAI refuses an exact fit of a fractional quota: the scheduler's rounding
    "kai2209-nonpreemptible-over-quota": (("k8s.scheduler-quota-exact-fit=warning",),
                                          (*CALM_GPUS, "k8s.pending-queue-quota")),
    # --- 10: DCGM (dcgmi diag/discovery/nvlink, exporter, nv-hostengine) ---
    # the exporter (rules/dcgm_exporter.py): a monitoring stack's problems, GPUs fine
    "dcgm-exporter-cannot-connect-hostengine": (("dcgm.exporter-hostengine-unreachable=warning",),
                                                CALM_GPUS),
    "dcgm-exporter-dcp-module-not-loaded": (("dcgm.exporter-profiling-unsupported=warning",),
                                            CALM_GPUS),
    "dcgm-exporter-metrics-csv-wrong-fields": (("dcgm.exporter-metrics-file-invalid=warning",),
                                               CALM_GPUS),
    "dcgm-exporter-stale-metrics": (("dcgm.exporter-stale=warning",), CALM_GPUS),
    # no NVSwitch, every link of both H100 NVL down: the bridge, a planned repair
    "dcgm198-dcgmi-nvlink-link-status": (("dcgm.nvlink-down=warning",),
                                         (CALM, "dcgm.nvlink-down=critical")),
    # dcgmi diag and nvvs.log (rules/dcgm_diag.py; tests/test_rules_dcgm_diag.py): DCGM's
    # own failures are never the GPUs'; a clean pass says nothing (no finding)
    "dcgm253-diag-r2-8x-b200": (("dcgm.internal-error=warning",), CALM_DCGM),
    "dcgm254-v100-580-pcie-bwchecker13": (("dcgm.install-problem=warning",), CALM_DCGM),
    "diag-r1-persistence-mode-fail-8x-h200": (("dcgm.persistence-off=warning",),
                                              (*CALM_DCGM, "dcgm.no-result")),
    "diag-r2-gpu-memory-fail-thermal-violation": (("dcgm.test-failed=critical",),
                                                  (CALM, "dcgm.internal-error")),
    "diag-r2-pass-after-injected-pcie-replay": ((), CALM_DCGM),
    "diag-r2-pass-p4de-nvlinks-expected-12": ((), CALM_DCGM),
    "diag-r2-pcie-numa-affinity-slurm": (("dcgm.internal-error=warning",), CALM_DCGM),
    # every test skipped: no result (the verdict is unknown), not a failure
    "diag-r3-json-all-skip-t400": (("dcgm.no-result=info",), CALM_DCGM),
    "diag-r3-targeted-power-fail-marginal": (("dcgm.power-marginal=warning",), CALM_DCGM),
    "discovery-l-8x-h800-healthy": (("dcgm.gpus-seen=ok",), CALM_GPUS),
    "exporter-metrics-a30-mig-1g6gb": (("dcgm.metrics-healthy=ok",), CALM_GPUS),
    "exporter-metrics-vgpu-grid-a100": (("dcgm.metrics-healthy=ok",), CALM_GPUS),
    "gpu-memtest-page-dcgmi-diag-r4": (("dcgm.persistence-off=warning",),
                                       (*CALM_DCGM, "dcgm.no-result")),
    # cuInit's 802 on every GPU of an NVSwitch system: the fabric manager, not 8 GPUs
    "nccltests264-dcgmi-diag-r3": (("dcgm.cuda-not-ready=critical",), CALM_DCGM),
    # NVML fails in the exporter's container: the hostengine's failure folds under it
    "nv-hostengine-debug-log-cannot-init-nvml": (
        ("container.nvml-init-failed=warning", "dcgm.hostengine-nvml-failed=warning"),
        CALM_GPUS),
    # read: only the host's nvidia-smi banner; the ERR! GPU is in the title alone,
    # the hostengine and container-hook NVML errors are not read
    # the hook's NVML error on the host (a GPU in ERR!) explains the hostengine's own
    "nv-hostengine-nvml-fail-gpu-err-state": (("container.hook-nvml-error=critical",
                                               "dcgm.hostengine-unreachable"),
                                              ("container.hook-failed",)),
    "nvvs-log-missing-diag-skus": (("dcgm.install-problem=warning",), CALM_DCGM),
    # the K80's nvidia-smi table (persistence really is off: information from a pasted
    # table, which cannot show a cluster node without its daemon) and the old exporter's
    "old-dcgm-exporter-fails-tesla-k80": (("dcgm.exporter-unsupported-gpu=warning",
                                           "persistence.off=info"), CALM_GPUS),
    # 7 B300 of a board of 8 under DCGM 3.3.9: too old for Blackwell, and a GPU short
    "xe9780-b300-dcgm-service-inactive": (("dcgm.too-old=warning",
                                           "dcgm.gpu-count-unexpected=warning"), (CALM,)),
    # a rack's table of per-node Xid 45 totals (an NVSentinel comment): the job's cleanup
    # signature on every node; the marked node is 4th of 17, no node is blamed or drained
    "xid45-counts-rack-nvl72": (("xid-counts.job-signature=info",),
                                (*CALM_GPUS, "xid-counts.node-outlier")),
    # DCGM as the field pastes it (issue 31; tests/test_rules_dcgm_pastes.py)
    "dcgm313-health-c-healthy-gb200": (("dcgm.health-ok=ok",), CALM_GPUS),
    "dcgm83-discovery-l-8x-a100": (("dcgm.gpus-seen=ok",), CALM_GPUS),
    # a test a source build lacks: DCGM's installation, nothing tested
    "dcgm67-diag-requested-test": (("dcgm.install-problem=warning",), CALM_DCGM),
    # NVVS refuses MIG GPUs: no verdict on them (exit 3), never DCGM's or the GPUs' fault
    "dcgm70-diag-i0-refused": (("dcgm.diag-mig-blocked=info",),
                               (*CALM_DCGM, "dcgm.install-problem")),
    "diag-r3-v-pass-v100-pcie": (("dcgm.diag-passed=ok",), CALM_DCGM),  # EUD skipped: fine
    "deepops-prolog-dcgm-diag-r1-fail": (("dcgm.deployment-cascade=warning",),
                                         (*CALM_DCGM, "dcgm.deployment-failed")),
    # the doc's pass table is cut after Graphics Processes: what it shows passed, the rest
    # is not there (exit 3, no drain); Blacklist and Page Retirement read as any other test
    "deepops-prolog-dcgm-diag-r1-pass": (("dcgm.no-result=info",), CALM_DCGM),
    # one test's object of a 4.x JSON: all 8 GPUs passed, the missing info is not a skip
    "dcgm215-diag-v4-json": (("dcgm.no-result=info",), CALM_DCGM),
    "dcgm62-dmon-prof-fields": (("dcgm.profiling-busy=warning",), CALM_GPUS),
    "dcgm210-hostengine-debug-nvswitch": (("dcgm.nvswitch-libs-missing=info",),
                                          (*CALM_GPUS, "dcgm.nvswitch-libs-missing=warning")),
    # the exporter: no NVML in its container is its pod's configuration
    "dcgmexp612-484-cannot-init-nvml": (("dcgm.exporter-nvml-missing=warning",),
                                        (*CALM_GPUS, NVML_LIB)),
    "dradriver166-dcgm-exporter": (("dcgm.exporter-nvml-missing=warning",), CALM_GPUS),
    "dcgmexp125-gke-t4": (("dcgm.exporter-nvml-missing=warning",),
                          (*CALM_GPUS, "container.nvml-init-failed")),
    # profiling skipped on a Maxwell GPU is expected; an old exporter that dies on it is not
    "dcgmexp395-m60": (("dcgm.exporter-profiling-unsupported=info",),
                       (*CALM_GPUS, "dcgm.exporter-profiling-unsupported=warning")),
    "gmt141-dcgm-exporter-fatal": (("dcgm.exporter-profiling-unsupported=warning",), CALM_GPUS),
    "do-dcgm-exporter-systemd": (("dcgm.exporter-running=ok",), CALM_GPUS),
    "dcgmexp277-gpu-util-quadro": (("dcgm.metrics-healthy=ok",), CALM_GPUS),  # idle: no pod
    # --- 11: CUDA, NVML and container-runtime errors and configuration ---
    # the + side of the diff: the nvidia runtime registered and the default (healthy)
    "containerd-config-toml-nvidia-runtime": (("container.runtime-configured=ok",),
                                              (CALM, "container.runtime-nvidia-missing",
                                               *GPU_FAULTS)),
    "cuda-802-azure-nd96asr-v4": (("cuda.fabric-not-ready=critical",), (CALM, *GPU_FAULTS)),
    "cuda-802-h200-hf-jobs": (("cuda.fabric-not-ready=critical",), (CALM, *GPU_FAULTS)),
    "cupy-804-quadro-rtx6000": (("cuda.forward-compat-unsupported=warning",),
                                (CALM, *GPU_FAULTS)),
    # daemon.json has the nvidia runtime, yet a daemon refused it: another daemon's file
    "daemon-json-nvidia-runtime-rootless": (("container.runtime-daemon-mismatch=warning",),
                                            ("container.runtime-nvidia-missing",
                                             *GPU_FAULTS)),
    "devicequery-fail-35-driver-insufficient": (("cuda.device-query-failed=warning",),
                                                (*GPU_FAULTS, "cuda.device-query-failed=critical")),
    "devicequery-pass-gtx770": (("cuda.device-query-ok",),
                                (CALM, "cuda.device-query-failed", *GPU_FAULTS)),
    "docker-could-not-select-device-driver": (("container.no-nvidia-gpu=warning",),
                                              (CALM, *GPU_FAULTS, "container.no-gpu-driver")),
    "docker-emulated-by-podman-cdi": (("container.cdi-unresolvable=warning",),
                                      (CALM, *GPU_FAULTS)),
    "docker-unknown-runtime-nvidia": (("container.unknown-runtime=warning",),
                                      (CALM, *GPU_FAULTS)),
    "nvidia-container-cli-info-8x-rtx2080ti": (("container.toolkit-sees-gpus=ok",),
                                               (CALM, *GPU_FAULTS)),
    "nvml-driver-library-mismatch-570-124": (("driver.version-mismatch=critical",),
                                             GPU_FAULTS),
    "nvml-mismatch-after-unattended-upgrade": (("driver.version-mismatch=critical",),
                                               GPU_FAULTS),
    # NVML's Unknown Error under a container's prompt: its lost cgroup device access
    "nvml-unknown-a10-t4": (("nvidia-smi.nvml-init-failed=warning",),
                            (CALM, *GPU_FAULTS, "nvidia-smi.nvml-init-failed=critical")),
    "nvml-unknown-after-daemon-reload": (("nvidia-smi.nvml-init-failed=warning",),
                                         (CALM, *GPU_FAULTS,
                                          "nvidia-smi.nvml-init-failed=critical")),
    "oci-hook-no-cuda-device": (("container.hook-cuda-error",), ("container.hook-failed",)),
    "oci-hook-nvml-driver-not-loaded": (("container.hook-driver-not-loaded=critical",),
                                        ("container.hook-failed",)),
    "podman-cdi-unresolvable-rtx2060": (("container.cdi-unresolvable=warning",),
                                        (CALM, *GPU_FAULTS)),
    # container stack, new captures (corpus rows 288-326): the toolkit and the engine
    # the image's CUDA is newer than the host driver: upgrade the driver, or an older image
    "nvdocker1442-requirement-cuda-11.0": (("container.cuda-requirement=warning",),
                                           (CALM, *GPU_FAULTS)),
    "petric2-27-docker-desktop-windows": (("container.cuda-requirement=warning",),
                                          (CALM, *GPU_FAULTS)),
    "ctkdocs-nvidia-docker-wrapper-selinux": (("container.selinux-denied=warning",),
                                              (CALM, *GPU_FAULTS)),
    "ctkdocs-groups-cannot-find-name": ((), (CALM, *GPU_FAULTS)),
    "nvidiactk-runtime-configure-docker-containerd-v1": (("container.ctk-configured=ok",),
                                                         (CALM, *GPU_FAULTS)),
    "nvidiactk-runtime-configure-containerd-v3": (("container.ctk-configured=ok",),
                                                  (CALM, *GPU_FAULTS)),
    # the image ships nvidia-smi (its lines wrapped mid-word as posted): the image's fault
    "nvdocker825-mount-error-nvidia-smi": (("container.mount-file-exists=warning",),
                                           (CALM, *GPU_FAULTS, "container.hook-failed")),
    # /proc/driver/nvidia of another driver release: reboot into the installed driver
    "nvdocker1068-mount-operation-failed": (("container.mount-proc-driver=critical",),
                                            (*GPU_FAULTS, "container.mount-missing-file")),
    # the driver container's teardown finds the modules held: stop the GPU clients
    "nvdocker1242-driver-container": (("driver.container-modules-in-use=warning",),
                                      (CALM, *GPU_FAULTS, "k8s.operator-driver-failed")),
    "nvctk63-cdi-generate-undefined-symbol": (("container.nvml-symbol-missing=warning",),
                                              (CALM, *GPU_FAULTS)),
    # docker run without --gpus: the job's command, not the host
    "mediapreview124-docker-run-without-gpus": (("cuda.no-device=warning",),
                                                (CALM, *GPU_FAULTS)),
    "tf-cublas-not-initialized": (("cuda.out-of-memory=warning",), (CALM, *GPU_FAULTS)),
    "torch-driver-too-old-11040": (("cuda.driver-too-old=warning",), (CALM, *GPU_FAULTS)),
    "torch-driver-too-old-9000": (("cuda.driver-too-old=warning",), (CALM, *GPU_FAULTS)),
    "torch-no-kernel-image-rtx4090": (("cuda.no-kernel-image=warning",),
                                      (CALM, *GPU_FAULTS, "cuda.driver-too-old")),
    "torch-no-kernel-image-rtx5090": (("cuda.no-kernel-image=warning",),
                                      (CALM, *GPU_FAULTS, "cuda.driver-too-old")),
    # --- 11: CUDA and frameworks (rules/cuda_job*.py, rules/driver.py; issue 31) ---
    # PTX from a newer toolkit than the driver: the build or the driver, never the GPU
    "cudamemtest31-ptx-unsupported": (("cuda.driver-too-old=warning",), (CALM, *GPU_FAULTS)),
    "llamadfdx6-cuda-error-unsupported-ptx": (("cuda.driver-too-old=warning",),
                                              (CALM, *GPU_FAULTS)),
    # unlike most CUDA errors, an uncorrectable ECC error is the node's hardware
    "deepfacelab89-tf-cuda-error-ecc": (("cuda.ecc-uncorrectable=critical",), (CALM,)),
    # every GPU unopened at once, no GPU listed (WSL2 with a TCC GPU): not two lost GPUs
    "wsl13027-nvidia-smi-unable-to-determine": (
        ("nvidia-smi.gpus-unreachable=warning",),
        (CALM, *GPU_FAULTS, "nvidia-smi.no-devices", "nvidia-smi.gpu-lost")),
    # NVML_ERROR_OPERATING_SYSTEM in a GPU-PV guest: its configuration
    "dxgkrnldkms7-gpupv-vm-nvml": (("nvidia-smi.nvml-init-failed=warning",
                                    "container.nvml-os-blocked"),
                                   (CALM, *GPU_FAULTS, "nvidia-smi.nvml-init-failed=critical")),
    # 999 as CUDA starts: the node's driver state (nvidia_uvm), not the job
    "llamacpp7218-ggml-cuda-init-unknown": (("cuda.unknown-error=warning",),
                                            (CALM, *GPU_FAULTS)),
    # runtime 12.6 on a 12.4 driver: minor-version compatibility, healthy
    "devicequery-pass-wsl2-gtx1650": (("cuda.device-query-ok=ok",),
                                      (CALM, *GPU_FAULTS, "cuda.device-query-failed",
                                       "cuda.driver-too-old")),
    # a time-sliced T4: others hold the memory, no isolation (the sharing's, the job's side)
    "devplugin323-torch-cuda-oom": (("cuda.out-of-memory=warning",), (CALM, *GPU_FAULTS)),
    "comosvc6-no-cuda-gpus-available": (("cuda.no-device=warning",), (CALM, *GPU_FAULTS)),
    "ghaf-jetson-orin-gpuvm-ollama": (("cuda.gpu-found=ok", "tegra.production-mode=info"),
                                      (CALM, *GPU_FAULTS)),
    "icra2024axs5-docker-torch-error-804": (("cuda.forward-compat-unsupported=warning",),
                                            (CALM, *GPU_FAULTS)),
    # 803 with an old driver: the node's software, fixed by a driver, never a hardware drain
    "easydiffusion379-torch-cuda-init-error-803": (("cuda.driver-mismatch=critical",),
                                                   GPU_FAULTS),
    # XLA needs 14.4 GiB on a 12 GB card: the job's size
    "afprofile8-jax-resource-exhausted": (("cuda.out-of-memory=warning",), (CALM, *GPU_FAULTS)),
}


@pytest.mark.parametrize(("part", "row"), [pytest.param(p, r, id=p) for p, r in GOLDEN.items()])
def test_golden_verdict(corpus, part, row):
    check_row(corpus.sample(part).path, row)


def test_every_category_9_10_11_sample_has_a_golden_row(corpus):
    assert not missing_rows(corpus, GOLDEN, ("9", "10", "11"))


def test_every_corpus_sample_has_one_golden_row(corpus):
    """Across the tables of every test_corpus_golden_* file."""
    parts = [part for table in golden_tables().values() for part in table]
    rows = {s.name: [p for p in parts if p in s.name] for s in corpus.samples}
    assert not [n for n, r in rows.items() if not r], "samples without a golden row"
    assert not {n: r for n, r in rows.items() if len(r) > 1}, "samples with two rows"
