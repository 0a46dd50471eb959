"""The container stack of the scenario hosts, and scenario ``stale-cdi-after-upgrade``.

The healthy host runs Kubernetes on containerd with the NVIDIA container toolkit: the
nvidia runtime registered and the default, a CDI spec generated for the installed
driver, no Docker daemon.json, gputriage itself run on the host (no container marker,
no NVIDIA_* variable).
"""

from __future__ import annotations

from gputriage.scenarios.model import Host, Outcome, healthy_hgx_h100
from gputriage.scenarios.render_host import LIB_DIR, tree

__all__ = ["OLD_DRIVER", "RENDERERS", "mount_error", "stale_cdi_after_upgrade"]

OLD_DRIVER = "535.161.07"  # the driver before the upgrade
_CRI = 'plugins."io.containerd.grpc.v1.cri".containerd'


def cdi_specs(host: Host) -> str:
    """/etc/cdi/nvidia.yaml as ``nvidia-ctk cdi generate`` writes it (the parts judged)."""
    v = host.cdi_driver_version or host.userspace_version
    lines = ["---", "cdiVersion: 0.5.0", "containerEdits:", "  deviceNodes:",
             "  - path: /dev/nvidiactl", "  - path: /dev/nvidia-uvm", "  hooks:",
             "  - args:", "    - nvidia-ctk", "    - hook", "    - update-ldcache",
             "    hookName: createContainer", "    path: /usr/bin/nvidia-ctk", "  mounts:"]
    for lib in ("libcuda.so", "libnvidia-ml.so", "libnvidia-ptxjitcompiler.so"):
        path = f"/{LIB_DIR}/{lib}.{v}"
        lines += [f"  - containerPath: {path}", f"    hostPath: {path}", "    options:",
                  "    - ro", "    - nosuid", "    - nodev", "    - bind"]
    lines.append("devices:")
    for name in [str(g.index) for g in host.gpus] + ["all"]:
        nodes = [f"/dev/nvidia{g.index}" for g in host.gpus if name in (str(g.index), "all")]
        lines += ["- containerEdits:", "    deviceNodes:"]
        lines += [f"    - path: {n}" for n in nodes]
        lines.append(f'  name: "{name}"')
    lines.append("kind: nvidia.com/gpu")
    return tree({"etc/cdi/nvidia.yaml": "\n".join(lines) + "\n"})


def nvidia_ctk_cdi_list(host: Host) -> str:
    names = [f"nvidia.com/gpu={g.index}" for g in host.gpus] + ["nvidia.com/gpu=all"]
    return "\n".join([f"INFO[0000] Found {len(names)} CDI devices", *names]) + "\n"


def containerd_config(host: Host) -> str:
    """/etc/containerd/config.toml after ``nvidia-ctk runtime configure --set-as-default``."""
    text = "\n".join([
        "version = 2", "", '[plugins."io.containerd.grpc.v1.cri"]',
        '  sandbox_image = "registry.k8s.io/pause:3.9"', f"  [{_CRI}]",
        '    default_runtime_name = "nvidia"', '    snapshotter = "overlayfs"',
        f"    [{_CRI}.runtimes.runc]", '      runtime_type = "io.containerd.runc.v2"',
        f"      [{_CRI}.runtimes.runc.options]", "        SystemdCgroup = true",
        f"    [{_CRI}.runtimes.nvidia]", '      runtime_type = "io.containerd.runc.v2"',
        f"      [{_CRI}.runtimes.nvidia.options]",
        '        BinaryName = "/usr/bin/nvidia-container-runtime"',
        "        SystemdCgroup = true", ""])
    return tree({"etc/containerd/config.toml": text})


def container_env(host: Host) -> str:
    """Run on the host: no container marker, and no NVIDIA_* / CUDA_* variable set."""
    return tree({"proc/self/environ": ""})


RENDERERS = {
    "cdi_specs": cdi_specs,
    "nvidia_ctk_cdi_list": nvidia_ctk_cdi_list,
    "docker_daemon_json": lambda host: tree({}),
    "containerd_config": containerd_config,
    "container_env": container_env,
}


def stale_cdi_after_upgrade() -> Host:
    """The driver upgraded from 535 to 550 and the node rebooted (module and libraries
    agree), but /etc/cdi/nvidia.yaml was not regenerated: it still mounts the 535
    libraries, and every GPU pod fails to start on the missing file."""
    host = healthy_hgx_h100()
    host.cdi_driver_version = OLD_DRIVER
    mount = mount_error(f"/{LIB_DIR}/libcuda.so.{OLD_DRIVER}")
    host.command_overrides["job_log"] = Outcome(
        "Events:\n"
        "  Type     Reason     Age                From     Message\n"
        "  ----     ------     ----               ----     -------\n"
        "  Normal   Scheduled  52s                default-scheduler  Successfully assigned "
        "ml/trainer-0 to gpu-node-017\n"
        "  Warning  Failed     12s (x3 over 40s)  kubelet  Error: failed to create "
        f"containerd task: failed to create shim task: {mount}\n"
        "(host) # nerdctl run --rm --device nvidia.com/gpu=all "
        "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04 nvidia-smi\n"
        f"FATA[0000] failed to create shim task: {mount}\n", 0)
    return host


def mount_error(lib: str) -> str:
    """runc's error when a CDI spec mounts a driver file that is gone."""
    return (f'OCI runtime create failed: runc create failed: unable to start container '
            f'process: error during container init: error mounting "{lib}" to rootfs at '
            f'"{lib}": stat {lib}: no such file or directory: unknown')
