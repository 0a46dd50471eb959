"""The fleet recipes under deploy/: Kubernetes manifests are well-formed
objects with least-privilege pod specs, shell scripts parse, and the Slurm
health check maps gputriage's exit status to the right action (run against
a fake ``gputriage`` and a fake ``scontrol`` that record their calls).
No Slurm or Kubernetes is needed."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

yaml = pytest.importorskip("yaml")

REPO = Path(__file__).resolve().parent.parent
DEPLOY = REPO / "deploy"
K8S = DEPLOY / "kubernetes"
SLURM = DEPLOY / "slurm"
SHELL_SCRIPTS = sorted([*SLURM.glob("*.sh"), *SLURM.glob("*.sbatch")])
WORKLOADS = ("daemonset.yaml", "job.yaml")

needs_bash = pytest.mark.skipif(shutil.which("bash") is None, reason="bash not installed")


# --- Kubernetes manifests -------------------------------------------------

def _docs(name: str) -> list[dict[str, Any]]:
    with (K8S / name).open(encoding="utf-8") as fh:
        return [d for d in yaml.safe_load_all(fh) if d is not None]


def _all_docs() -> list[dict[str, Any]]:
    return [d for p in sorted(K8S.glob("*.yaml")) for d in _docs(p.name)]


def _pod_spec(name: str) -> dict[str, Any]:
    (doc,) = _docs(name)
    return doc["spec"]["template"]["spec"]


def _container(name: str) -> dict[str, Any]:
    (container,) = _pod_spec(name)["containers"]
    return container


def _script(name: str) -> str:
    command = _container(name)["command"]
    assert command[:2] == ["/bin/sh", "-c"]
    return command[2]


def test_every_manifest_is_a_kubernetes_object() -> None:
    docs = _all_docs()
    assert {d["kind"] for d in docs} >= {"DaemonSet", "Job", "PersistentVolumeClaim",
                                        "Namespace"}
    for doc in docs:
        assert isinstance(doc.get("apiVersion"), str) and doc["apiVersion"]
        assert isinstance(doc.get("kind"), str) and doc["kind"]
        assert isinstance(doc["metadata"].get("name"), str)
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == "gputriage"
            assert isinstance(doc.get("spec"), dict)


def test_api_versions_match_kinds() -> None:
    expected = {"DaemonSet": "apps/v1", "Job": "batch/v1",
                "PersistentVolumeClaim": "v1", "Namespace": "v1"}
    for doc in _all_docs():
        assert doc["apiVersion"] == expected[doc["kind"]], doc["kind"]


@pytest.mark.parametrize("name", WORKLOADS)
def test_selector_matches_template_labels(name: str) -> None:
    (doc,) = _docs(name)
    labels = doc["spec"]["template"]["metadata"]["labels"]
    selector = doc["spec"].get("selector", {}).get("matchLabels", {})
    assert all(labels.get(k) == v for k, v in selector.items())
    if doc["kind"] == "DaemonSet":
        assert selector, "a DaemonSet needs a selector"


@pytest.mark.parametrize("name", WORKLOADS)
def test_container_runs_gputriage_check_json(name: str) -> None:
    container = _container(name)
    assert container["image"]
    assert "gputriage check --json" in _script(name)
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    assert env["NVIDIA_DRIVER_CAPABILITIES"]["value"] == "utility"
    # GPUs come from the env var: the pod must not take nvidia.com/gpu from workloads.
    for kind in ("requests", "limits"):
        assert "nvidia.com/gpu" not in container.get("resources", {}).get(kind, {})


@pytest.mark.parametrize("name", WORKLOADS)
def test_runs_on_gpu_nodes_only(name: str) -> None:
    spec = _pod_spec(name)
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists",
            "effect": "NoSchedule"} in spec["tolerations"]
    assert spec["runtimeClassName"] == "nvidia"


@pytest.mark.parametrize("name", WORKLOADS)
def test_volume_mounts_match_volumes(name: str) -> None:
    spec = _pod_spec(name)
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = _container(name)["volumeMounts"]
    names = [m["name"] for m in mounts]
    assert len(names) == len(set(names))
    assert set(names) == set(volumes), "every mount has a volume and every volume is used"
    paths = [m["mountPath"] for m in mounts]
    assert len(paths) == len(set(paths))
    assert "/results" in paths


@pytest.mark.parametrize("name", WORKLOADS)
def test_host_paths_are_read_only(name: str) -> None:
    spec = _pod_spec(name)
    host = {v["name"] for v in spec["volumes"] if "hostPath" in v}
    assert host, "the host's logs and identity come from hostPath volumes"
    for mount in _container(name)["volumeMounts"]:
        if mount["name"] in host:
            assert mount.get("readOnly") is True, mount["name"]
    for volume in spec["volumes"]:
        if "hostPath" in volume:
            # An explicit type: a missing path fails visibly instead of being created.
            assert volume["hostPath"]["type"] in {"Directory", "File"}


@pytest.mark.parametrize("name", WORKLOADS)
def test_least_privilege(name: str) -> None:
    spec = _pod_spec(name)
    sc = _container(name)["securityContext"]
    assert sc["privileged"] is False
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert set(sc["capabilities"]["add"]) <= {"SYSLOG"}
    assert spec["automountServiceAccountToken"] is False
    assert not spec.get("hostPID") and not spec.get("hostIPC")
    assert "ports" not in _container(name)


def test_results_claim_exists() -> None:
    claims = {d["metadata"]["name"]: d for d in _all_docs()
              if d["kind"] == "PersistentVolumeClaim"}
    for name in WORKLOADS:
        for volume in _pod_spec(name)["volumes"]:
            if "persistentVolumeClaim" in volume:
                claim = claims[volume["persistentVolumeClaim"]["claimName"]]
                assert "ReadWriteMany" in claim["spec"]["accessModes"]


def test_job_never_retries_on_findings() -> None:
    (job,) = _docs("job.yaml")
    spec = job["spec"]
    assert spec["template"]["spec"]["restartPolicy"] == "Never"
    assert spec["completions"] == spec["parallelism"]
    anti = spec["template"]["spec"]["affinity"]["podAntiAffinity"]
    (term,) = anti["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert _script("job.yaml").rstrip().endswith("exit 0")


@needs_bash
@pytest.mark.parametrize("name", WORKLOADS)
def test_embedded_scripts_parse(name: str) -> None:
    shells = ["bash"] + (["/bin/sh"] if Path("/bin/sh").exists() else [])
    for shell in shells:  # the image runs it with /bin/sh (dash on Debian)
        proc = subprocess.run([shell, "-n", "-c", _script(name)], capture_output=True,
                              text=True, timeout=30)
        assert proc.returncode == 0, (shell, proc.stderr)


def test_dockerfile_builds_on_python_slim_with_nvidia_runtime() -> None:
    text = (DEPLOY / "Dockerfile").read_text(encoding="utf-8")
    assert "FROM python:3.12-slim" in text
    assert "pip install" in text
    assert "NVIDIA_DRIVER_CAPABILITIES=utility" in text
    assert "NVIDIA_VISIBLE_DEVICES=all" in text


def test_docs_cover_every_recipe() -> None:
    text = (REPO / "docs" / "fleet.md").read_text(encoding="utf-8")
    for path in [*SHELL_SCRIPTS, *K8S.glob("*.yaml"), DEPLOY / "Dockerfile"]:
        assert path.name in text, path.name
    assert "gputriage fleet" in text


# --- Slurm scripts ---------------------------------------------------------

@needs_bash
@pytest.mark.parametrize("script", SHELL_SCRIPTS, ids=lambda p: p.name)
def test_shell_scripts_parse(script: Path) -> None:
    proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True,
                          timeout=30)
    assert proc.returncode == 0, proc.stderr


def _write_tool(path: Path, body: str) -> None:
    path.write_text("#!/usr/bin/env bash\n" + body, encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


RESULT = {
    "schema": "gputriage/result/v1",
    "verdict": "critical",
    "findings": [
        {"id": "xid-79", "severity": "critical", "title": "GPU fell off the bus"},
        {"id": "xid-79", "severity": "critical", "title": "GPU fell off the bus"},
        {"id": "nvlink-down", "severity": "critical", "title": "NVLink inactive"},
        {"id": "thermal", "severity": "warning", "title": "hot"},
    ],
}


class Fakes:
    """A tmp dir with fake gputriage / scontrol / logger / srun on PATH that
    record each call (one line of arguments) in <tool>.calls."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.bin = root / "bin"
        self.bin.mkdir()
        self.results = root / "results"
        (root / "result.json").write_text(json.dumps(RESULT, indent=2), encoding="utf-8")
        record = ('args="$*"; echo "${args//$\'\\n\'/ }" '
                  '>>"$FAKE_ROOT/$(basename "$0").calls"\n')
        _write_tool(self.bin / "gputriage", record + (
            'if [ -n "${FAKE_SLEEP:-}" ]; then sleep "$FAKE_SLEEP"; fi\n'
            'cat "$FAKE_ROOT/result.json"\n'
            'echo "fake gputriage on ${SLURMD_NODENAME:-?}" >&2\n'
            'rc_var="FAKE_RC_${SLURMD_NODENAME:-none}"\n'
            'exit "${!rc_var:-${FAKE_RC:-0}}"\n'))
        _write_tool(self.bin / "scontrol", record + 'exit "${FAKE_SCONTROL_RC:-0}"\n')
        _write_tool(self.bin / "logger", record)
        # srun: drop the options, run the task once per fake node.
        _write_tool(self.bin / "srun", record + (
            'while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done\n'
            'for n in ${FAKE_NODES:-node1}; do SLURMD_NODENAME="$n" "$@"; done\n'))

    def env(self, **extra: str) -> dict[str, str]:
        """A clean environment with the fakes first on PATH, plus ``extra``."""
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("GPUTRIAGE", "SLURM", "FAKE_"))}
        env.update({
            "PATH": f"{self.bin}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
            "FAKE_ROOT": str(self.root),
            "GPUTRIAGE_HEALTHCHECK_CONF": str(self.root / "absent.conf"),
            "GPUTRIAGE_RESULT_DIR": str(self.results),
            "SLURMD_NODENAME": "gpu042",
        })
        env.update(extra)
        return env

    def calls(self, tool: str) -> list[str]:
        """The recorded calls of one fake tool, one line each."""
        path = self.root / f"{tool}.calls"
        if not path.exists():
            return []
        return path.read_text(encoding="utf-8").splitlines()

    def run(self, script: str, *args: str, **extra: str) -> subprocess.CompletedProcess:
        """Run a deploy/slurm script with bash in the fake environment."""
        return subprocess.run(["bash", str(SLURM / script), *args], env=self.env(**extra),
                              capture_output=True, text=True, timeout=60)


@pytest.fixture
def fakes(tmp_path: Path) -> Fakes:
    """Fake tools in a fresh tmp dir."""
    return Fakes(tmp_path)


@needs_bash
def test_ok_does_nothing(fakes: Fakes) -> None:
    proc = fakes.run("healthcheck.sh", FAKE_RC="0")
    assert proc.returncode == 0, proc.stderr
    assert fakes.calls("scontrol") == []
    assert fakes.calls("logger") == []
    (call,) = fakes.calls("gputriage")
    assert call.startswith("check --json")
    saved = json.loads((fakes.results / "gpu042.json").read_text(encoding="utf-8"))
    assert saved["schema"] == "gputriage/result/v1"
    assert not list(fakes.results.glob("*.tmp.*"))
    assert "fake gputriage" in (fakes.results / "gpu042.stderr").read_text(encoding="utf-8")


@needs_bash
def test_warning_logs_without_draining(fakes: Fakes) -> None:
    proc = fakes.run("healthcheck.sh", FAKE_RC="1")
    assert proc.returncode == 0, proc.stderr
    assert fakes.calls("scontrol") == []
    (logged,) = fakes.calls("logger")
    assert "gpu042" in logged and "WARNING" in logged
    assert "WARNING" in proc.stderr


@needs_bash
def test_critical_drains_with_a_reason(fakes: Fakes) -> None:
    proc = fakes.run("healthcheck.sh", FAKE_RC="2")
    assert proc.returncode == 0, proc.stderr  # HealthCheckProgram: exit status ignored
    (call,) = fakes.calls("scontrol")
    assert call.startswith("update nodename=gpu042 state=drain reason=gputriage CRITICAL")
    assert call.endswith("xid-79,nvlink-down")


@needs_bash
def test_critical_drains_using_the_host_name_outside_slurm(fakes: Fakes) -> None:
    env = fakes.env(FAKE_RC="2")
    del env["SLURMD_NODENAME"]
    proc = subprocess.run(["bash", str(SLURM / "healthcheck.sh")], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    short = subprocess.run(["hostname", "-s"], capture_output=True, text=True).stdout.strip()
    (call,) = fakes.calls("scontrol")
    assert f"nodename={short} state=drain" in call


@needs_bash
@pytest.mark.parametrize("how", ["argument", "slurm-context", "wrapper"])
def test_critical_in_prolog_fails_so_slurm_requeues(fakes: Fakes, how: str) -> None:
    if how == "argument":
        proc = fakes.run("healthcheck.sh", "prolog", FAKE_RC="2")
    elif how == "slurm-context":
        proc = fakes.run("healthcheck.sh", FAKE_RC="2", SLURM_SCRIPT_CONTEXT="prolog_slurmd")
    else:
        proc = fakes.run("prolog.sh", FAKE_RC="2")
    assert proc.returncode == 1, proc.stderr
    assert len(fakes.calls("scontrol")) == 1


@needs_bash
def test_epilog_ok_exits_zero_and_fail_exit_is_configurable(fakes: Fakes) -> None:
    assert fakes.run("epilog.sh", FAKE_RC="0").returncode == 0
    proc = fakes.run("epilog.sh", FAKE_RC="2", GPUTRIAGE_FAIL_EXIT="7")
    assert proc.returncode == 7


@needs_bash
def test_unknown_is_configurable(fakes: Fakes) -> None:
    proc = fakes.run("healthcheck.sh", FAKE_RC="3")
    assert proc.returncode == 0 and fakes.calls("scontrol") == []
    assert any("UNKNOWN" in line for line in fakes.calls("logger"))
    fakes.run("healthcheck.sh", FAKE_RC="3", GPUTRIAGE_ON_UNKNOWN="drain")
    (call,) = fakes.calls("scontrol")
    assert "state=drain reason=gputriage UNKNOWN" in call
    logged = len(fakes.calls("logger"))
    fakes.run("healthcheck.sh", FAKE_RC="3", GPUTRIAGE_ON_UNKNOWN="ignore")
    assert len(fakes.calls("logger")) == logged and len(fakes.calls("scontrol")) == 1


@needs_bash
def test_a_broken_tool_never_drains(fakes: Fakes) -> None:
    for rc in ("64", "66", "70", "127"):
        proc = fakes.run("healthcheck.sh", FAKE_RC=rc)
        assert proc.returncode == 0, proc.stderr
    assert fakes.calls("scontrol") == []
    assert len(fakes.calls("logger")) == 4


@needs_bash
def test_hung_check_is_bounded(fakes: Fakes) -> None:
    proc = fakes.run("healthcheck.sh", FAKE_SLEEP="30", GPUTRIAGE_TIMEOUT="1")
    assert proc.returncode == 0, proc.stderr
    assert "timed out" in proc.stderr
    assert fakes.calls("scontrol") == []
    fakes.run("healthcheck.sh", FAKE_SLEEP="30", GPUTRIAGE_TIMEOUT="1",
              GPUTRIAGE_ON_TIMEOUT="drain")
    (call,) = fakes.calls("scontrol")
    assert "reason=gputriage timed out after 1s" in call


@needs_bash
def test_scontrol_failure_and_dry_run(fakes: Fakes) -> None:
    proc = fakes.run("healthcheck.sh", FAKE_RC="2", FAKE_SCONTROL_RC="1")
    assert proc.returncode == 0
    assert "could not drain" in proc.stderr
    proc = fakes.run("healthcheck.sh", FAKE_RC="2", GPUTRIAGE_DRY_RUN="1")
    assert "dry run: scontrol update nodename=gpu042 state=drain" in proc.stdout
    assert len(fakes.calls("scontrol")) == 1  # only the first, failing call


@needs_bash
def test_usage_error(fakes: Fakes) -> None:
    proc = fakes.run("healthcheck.sh", "bogus")
    assert proc.returncode == 64
    assert fakes.calls("gputriage") == []


@needs_bash
def test_collect_all_writes_one_result_per_node(fakes: Fakes, tmp_path: Path) -> None:
    out = tmp_path / "shared"
    proc = fakes.run("collect-all.sbatch", str(out), FAKE_NODES="node1 node2 node3",
                     FAKE_RC_node2="2", SLURM_JOB_NUM_NODES="3")
    assert proc.returncode == 0, proc.stderr
    (srun,) = fakes.calls("srun")
    assert "--ntasks-per-node=1" in srun and "--nodes=3" in srun
    assert len(fakes.calls("gputriage")) == 3
    for node, rc in (("node1", "0"), ("node2", "2"), ("node3", "0")):
        assert json.loads((out / f"{node}.json").read_text(encoding="utf-8"))["findings"]
        assert (out / f"{node}.rc").read_text(encoding="utf-8").strip() == rc
        assert f"on {node}" in (out / f"{node}.stderr").read_text(encoding="utf-8")
    assert not list(out.glob("*.tmp"))
    assert "2 node(s) exit 0 (ok)" in proc.stdout
    assert "1 node(s) exit 2 (critical)" in proc.stdout
    assert f"gputriage fleet {out}" in proc.stdout


@needs_bash
def test_collect_all_needs_a_directory(fakes: Fakes) -> None:
    proc = fakes.run("collect-all.sbatch")
    assert proc.returncode == 64
    assert fakes.calls("srun") == []


@needs_bash
def test_nhc_mode_reports_instead_of_draining(fakes: Fakes) -> None:
    proc = fakes.run("healthcheck.sh", "nhc", FAKE_RC="2")
    assert proc.returncode == 1
    assert proc.stdout.strip() == "gputriage CRITICAL: xid-79,nvlink-down"
    assert fakes.calls("scontrol") == []
    assert fakes.run("healthcheck.sh", "nhc", FAKE_RC="1").returncode == 0


@needs_bash
def test_job_script_writes_the_result_and_exits_zero(fakes: Fakes, tmp_path: Path) -> None:
    out = tmp_path / "results"
    out.mkdir()
    script = _script("job.yaml").replace("out=/results", f"out={out}")
    env = fakes.env(NODE_NAME="gpu7", GPUTRIAGE_TIMEOUT="30", FAKE_RC="2")
    proc = subprocess.run(["/bin/sh" if Path("/bin/sh").exists() else "bash", "-c", script],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "gpu7: gputriage check exit 2" in proc.stdout
    assert (out / "gpu7.rc").read_text(encoding="utf-8").strip() == "2"
    assert json.loads((out / "gpu7.json").read_text(encoding="utf-8"))["verdict"] == "critical"
    (call,) = fakes.calls("gputriage")
    assert call.startswith("check --json")
