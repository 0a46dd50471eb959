"""The fleet recipes under deploy/: Kubernetes manifests are well-formed
objects with least-privilege pod specs, shell scripts parse, and the Slurm
health check maps gputriage's exit status to the right action (run against
a fake ``gputriage`` and a fake ``scontrol`` that record their calls). The
repair -> ack -> resume loop runs with the real gputriage on a scenario host
and fake ``scontrol`` / ``kubectl``. No Slurm or Kubernetes is needed
(tests/test_slurm_real.py drives a real one-node Slurm where it can)."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
from datetime import datetime, timedelta, timezone
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
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding"}
STATE_DIR = "/var/lib/gputriage"  # the host path of the history and acknowledgements
GPUTRIAGE = Path(sys.executable).parent / "gputriage"  # the venv's, for the real loop

needs_bash = pytest.mark.skipif(shutil.which("bash") is None, reason="bash not installed")


# --- Kubernetes manifests -------------------------------------------------

def _docs(name: str) -> list[dict[str, Any]]:
    with (K8S / name).open(encoding="utf-8") as fh:
        return [d for d in yaml.safe_load_all(fh) if d is not None]


def _all_docs() -> list[dict[str, Any]]:
    return [d for p in sorted(K8S.glob("*.yaml")) for d in _docs(p.name)]


def _pod_spec(name: str) -> dict[str, Any]:
    (doc,) = [d for d in _docs(name) if d["kind"] in ("DaemonSet", "Job", "CronJob")]
    if doc["kind"] == "CronJob":
        return doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]
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
                                        "Namespace", "CronJob", "ClusterRole"}
    for doc in docs:
        assert isinstance(doc.get("apiVersion"), str) and doc["apiVersion"]
        assert isinstance(doc.get("kind"), str) and doc["kind"]
        assert isinstance(doc["metadata"].get("name"), str)
        if doc["kind"] not in CLUSTER_SCOPED:
            assert doc["metadata"]["namespace"] == "gputriage"
        if doc["kind"] in ("DaemonSet", "Job", "CronJob", "PersistentVolumeClaim"):
            assert isinstance(doc.get("spec"), dict)


def test_api_versions_match_kinds() -> None:
    expected = {"DaemonSet": "apps/v1", "Job": "batch/v1", "CronJob": "batch/v1",
                "PersistentVolumeClaim": "v1", "Namespace": "v1", "ServiceAccount": "v1",
                "ClusterRole": "rbac.authorization.k8s.io/v1",
                "ClusterRoleBinding": "rbac.authorization.k8s.io/v1", "Service": "v1",
                "ConfigMap": "v1"}
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
def test_host_paths_are_read_only_but_the_state(name: str) -> None:
    spec = _pod_spec(name)
    host = {v["name"]: v["hostPath"] for v in spec["volumes"] if "hostPath" in v}
    assert host, "the host's logs and identity come from hostPath volumes"
    writable = [m for m in _container(name)["volumeMounts"]
                if m["name"] in host and m.get("readOnly") is not True]
    # The one writable host path: the history, where acknowledgements outlive the pod.
    assert [(m["name"], m["mountPath"]) for m in writable] == [("state", STATE_DIR)]
    assert host["state"] == {"path": STATE_DIR, "type": "DirectoryOrCreate"}
    env = {e["name"]: e.get("value") for e in _container(name)["env"]}
    assert env["GPUTRIAGE_STATE_DIR"] == STATE_DIR
    for volume_name, host_path in host.items():
        if volume_name != "state":
            # An explicit type: a missing path fails visibly instead of being created.
            assert host_path["type"] in {"Directory", "File"}


@pytest.mark.parametrize("name", (*WORKLOADS, "watch.yaml"))
def test_search_databases_are_kept_in_a_writable_folder(name: str) -> None:
    """The root file system is read-only: the compiled log-search databases go to the
    pod's own /tmp (an emptyDir), else every run would compile them again."""
    from gputriage.text.hscache import CACHE_DIR_ENV

    container = _container(name)
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    env = {e["name"]: e.get("value") for e in container["env"]}
    folder = Path(env[CACHE_DIR_ENV])
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in _pod_spec(name)["volumes"]}
    (mount,) = [p for p in mounts if folder.is_relative_to(p)]
    assert "emptyDir" in volumes[mounts[mount]] and folder != Path(mount)


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
    text = "\n".join((REPO / "docs" / name).read_text(encoding="utf-8")
                     for name in ("fleet.md", "slurm.md", "kubernetes.md", "watch.md",
                                  "alerts.md"))
    for path in [*SHELL_SCRIPTS, *K8S.glob("*.yaml"), DEPLOY / "Dockerfile",
                 *(DEPLOY / "node-problem-detector").iterdir(),
                 *(DEPLOY / "prometheus").glob("*.yaml")]:
        assert path.name in text, path.name
    assert "gputriage fleet" in text
    for step in ("gputriage ack", "resume.sh", "state=resume", "kubectl uncordon",
                 "check-once"):
        assert step in text, step


# --- Slurm scripts ---------------------------------------------------------

@needs_bash
@pytest.mark.parametrize("script", SHELL_SCRIPTS, ids=lambda p: p.name)
def test_shell_scripts_parse(script: Path) -> None:
    proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True,
                          timeout=30)
    assert proc.returncode == 0, proc.stderr


# the fake sinfo's body (python -c): the fleet from the environment, as sinfo prints it
FAKE_SINFO = r"""
import os, sys
def rows(text):
    return [r.split("|") for r in text.encode().decode("unicode_escape").splitlines() if r]
out = {r[0]: r[1:] for r in rows(os.environ.get("FAKE_SINFO_R", ""))}
argv = sys.argv[1:]
if "-R" in argv:
    sys.stdout.write("".join(f"{n}|{w}|{'|'.join(why)}\n" for n, (w, *why) in out.items()))
    sys.exit(0)
fields = [f.split(":", 1) for f in argv[argv.index("-O") + 1].split(",")]
fleet = os.environ.get("FAKE_SINFO_N") or os.environ["FAKE_FLEET"]
for name, gres, state, *comment in rows(fleet):
    when, why = (out[name][0], "|".join(out[name][1:])) if name in out else ("Unknown", "")
    value = {"NodeList": name, "Gres": gres, "TimeStamp": when, "Reason": why or "none",
             "StateCompact": "drain" if why and state == "idle" else state,
             "Comment": "|".join(comment) or "(null)"}
    sys.stdout.write("".join(value[f] + end for f, end in fields) + "\n")
"""


def _write_tool(path: Path, body: str) -> None:
    path.write_text("#!/usr/bin/env bash\n" + body, encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def _gpu(bus: str) -> dict[str, str]:
    return {"kind": "gpu", "pci_bus_id": bus}


def _finding(fid: str, severity: str = "critical", status: str = "current",
             blame: str = "node", scope: dict | None = None, **extra: Any) -> dict[str, Any]:
    return {"id": fid, "severity": severity, "status": status, "blame": blame,
            "scope": scope or {"kind": "node"}, "title": fid, **extra}


RESULT = {
    "schema": "gputriage/result/v1",
    "verdict": "critical",
    "findings": [
        _finding("xid.79", scope=_gpu("0000:9a:00.0")),
        _finding("xid.79", scope=_gpu("0000:ab:00.0")),
        _finding("nvlink.down", scope=_gpu("0000:18:00.0"),
                 also=[_gpu("0000:2a:00.0"), _gpu("0000:3a:00.0")]),
        # neither acknowledged nor past findings are named in a drain reason
        _finding("xid.48", status="acknowledged", scope=_gpu("0000:5d:00.0")),
        _finding("xid.13", status="past", scope=_gpu("0000:5d:00.0")),
        _finding("thermal", severity="warning", scope=_gpu("0000:db:00.0")),
        _finding("fabric.ok", severity="ok"),
    ],
}
REASON = ("xid.79 GPUs 0000:9a:00.0 0000:ab:00.0, "
          "nvlink.down GPUs 0000:18:00.0 0000:2a:00.0 +1")


class Fakes:
    """A tmp dir with fake gputriage / scontrol / logger / srun on PATH that
    record each call (one line of arguments) in <tool>.calls."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.bin = root / "bin"
        self.bin.mkdir(parents=True)
        self.results = root / "results"
        (root / "result.json").write_text(json.dumps(RESULT, indent=2), encoding="utf-8")
        record = ('args="$*"; echo "${args//$\'\\n\'/ }" '
                  '>>"$FAKE_ROOT/$(basename "$0").calls"\n')
        # drain-guard is the real one (the envelope), asking the fake sinfo and scontrol
        _write_tool(self.bin / "gputriage", record + (
            f'if [ "${{1:-}}" = drain-guard ]; then exec {sys.executable} -m gputriage '
            '"$@"; fi\n'
            'if [ "${1:-}" = ack ]; then exit "${FAKE_ACK_RC:-0}"; fi\n'
            'if [ -n "${FAKE_SLEEP:-}" ]; then sleep "$FAKE_SLEEP"; fi\n'
            'cat "$FAKE_ROOT/result.json"\n'
            'echo "fake gputriage on ${SLURMD_NODENAME:-?}" >&2\n'
            'rc_var="FAKE_RC_${SLURMD_NODENAME:-none}"\n'
            'exit "${!rc_var:-${FAKE_RC:-0}}"\n'))
        _write_tool(self.bin / "scontrol", record + 'exit "${FAKE_SCONTROL_RC:-0}"\n')
        # sinfo: the fleet's nodes (FAKE_SINFO_N or FAKE_FLEET, "name|gres|state|comment"
        # rows) and those out of service with a reason (FAKE_SINFO_R, "name|time|reason"),
        # printed as -R's "%N|%H|%E" or as the -O fields asked for
        _write_tool(self.bin / "sinfo", (
            '[ "${FAKE_SINFO_RC:-0}" = 0 ] || exit "$FAKE_SINFO_RC"\n'
            f'exec {sys.executable} -c "$FAKE_SINFO" "$@"\n'))
        _write_tool(self.bin / "logger", record)
        _write_tool(self.bin / "kubectl", record + (
            'if [ "$1" = get ]; then echo "${FAKE_UNSCHEDULABLE:-}"; fi\n'))
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
            # the envelope enforced, confirmation at once, in a fleet of 8 idle GPU nodes
            "GPUTRIAGE_DRAIN": "enforce", "GPUTRIAGE_DRAIN_SETTLE": "0",
            "GPUTRIAGE_KILL_SWITCH": str(self.root / "observe-only"),
            "FAKE_FLEET": "".join(f"gpu{n:03d}|gpu:h100:8|idle\\n" for n in range(40, 48)),
            "FAKE_SINFO": FAKE_SINFO,
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
    assert logged.endswith(f"WARNING: {REASON}, thermal GPU 0000:db:00.0")


@needs_bash
def test_critical_drains_with_a_reason(fakes: Fakes) -> None:
    proc = fakes.run("healthcheck.sh", FAKE_RC="2")
    assert proc.returncode == 0, proc.stderr  # HealthCheckProgram: exit status ignored
    (call,) = fakes.calls("scontrol")
    drain, _, comment = call.partition(" comment=")
    assert drain == f"update nodename=gpu042 state=drain reason=gputriage CRITICAL: {REASON}"
    # the drain's time, for the rate, in the node's Comment (docs/unattended.md)
    assert re.fullmatch(r"gputriage-drains=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", comment)
    saved = json.loads((fakes.results / "gpu042.json").read_text(encoding="utf-8"))
    assert saved == RESULT  # the whole result is kept


@needs_bash
@pytest.mark.parametrize("findings, reason", [
    # a result without statuses (an older gputriage): every critical is current
    ([{"id": "xid-79", "severity": "critical"}, {"id": "nvlink-down", "severity": "critical"}],
     "xid-79, nvlink-down"),
    # the node's findings first; the job's marked (with --job-faults-fail)
    ([_finding("nccl.ib-disabled", blame="job-config"), _finding("gpu.missing")],
     "gpu.missing, nccl.ib-disabled (job)"),
    # nothing current: no drain (the envelope's allow-list sees no current critical)
    ([_finding("xid.79", status="acknowledged")], None),
    # many: cut at a finding, with the count left out
    ([_finding(f"rule.number-{n:02d}", scope=_gpu(f"0000:{n:02x}:00.0")) for n in range(9)],
     "0000:03:00.0, +5 more"),
])
def test_drain_reason_names_current_criticals(fakes: Fakes, findings: list,
                                               reason: str | None) -> None:
    (fakes.root / "result.json").write_text(json.dumps({"findings": findings}),
                                            encoding="utf-8")
    proc = fakes.run("healthcheck.sh", FAKE_RC="2", GPUTRIAGE_DRAIN_ALLOW="*")
    if reason is None:
        assert fakes.calls("scontrol") == [] and "breaker allow-list" in proc.stderr
        return
    (call,) = fakes.calls("scontrol")
    said = call.split("reason=gputriage CRITICAL: ", 1)[1].split(" comment=")[0]
    assert said.startswith(reason) or said.endswith(reason), said
    assert len(said) < 200


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
def test_drains_resumed_within_the_hour_still_count_for_the_rate(fakes: Fakes) -> None:
    """Two nodes drained by gputriage and resumed 10 minutes ago: their Comments keep
    the drains, so a third within the hour is refused (breaker rate), none drained."""
    from datetime import datetime, timedelta
    ago = (datetime.now() - timedelta(minutes=10)).isoformat(timespec="seconds")
    fleet = (f"gpu040|gpu:8|idle|gputriage-drains={ago}\\n"
             f"gpu041|gpu:8|idle|PSU swapped gputriage-drains={ago}\\n"
             + "".join(f"gpu{n:03d}|gpu:8|idle|(null)\\n" for n in range(42, 48)))
    proc = fakes.run("healthcheck.sh", FAKE_RC="2", FAKE_SINFO_N=fleet)
    assert proc.returncode == 0, proc.stderr
    assert fakes.calls("scontrol") == [] and "breaker rate" in proc.stderr, proc.stderr


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


@pytest.mark.slow  # waits out two 1 s timeouts
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
def test_first_install_is_observe_only_and_the_kill_switch_wins(fakes: Fakes) -> None:
    env = fakes.env(FAKE_RC="2")
    del env["GPUTRIAGE_DRAIN"]  # nothing set: observe-only
    proc = subprocess.run(["bash", str(SLURM / "healthcheck.sh"), "prolog"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0  # the job runs: a failed prolog would drain anyway
    assert fakes.calls("scontrol") == []
    assert "breaker observe-only" in proc.stderr and "CRITICAL" in proc.stderr
    (fakes.root / "observe-only").write_text("", encoding="utf-8")
    proc = fakes.run("healthcheck.sh", FAKE_RC="2")  # enforced, but the switch is on
    assert fakes.calls("scontrol") == [] and "breaker kill-switch" in proc.stderr
    assert json.loads((fakes.results / "gpu042.json").read_text())["verdict"] == "critical"


@needs_bash
def test_the_budget_refuses_beyond_the_fleet_fraction(fakes: Fakes) -> None:
    out = "".join(f"gpu04{n}|2026-12-06T10:00:00|gputriage CRITICAL: xid.79\\n"
                  for n in (0, 1))
    proc = fakes.run("healthcheck.sh", FAKE_RC="2", FAKE_SINFO_R=out)
    assert fakes.calls("scontrol") == []
    assert "breaker fleet-fraction: 2 of 8 GPU nodes already out" in proc.stderr
    # drained by someone else (maintenance): not ours, not counted
    other = out.replace("gputriage CRITICAL: xid.79", "maintenance")
    fakes.run("healthcheck.sh", FAKE_RC="2", FAKE_SINFO_R=other)
    assert len(fakes.calls("scontrol")) == 1
    # nhc mode asks too, and stays quiet when refused
    proc = fakes.run("healthcheck.sh", "nhc", FAKE_RC="2", FAKE_SINFO_R=out)
    assert proc.returncode == 0 and proc.stdout == ""
    # the controller cannot be asked: nothing drained
    proc = fakes.run("healthcheck.sh", FAKE_RC="2", FAKE_SINFO_RC="1")
    assert "could not drain" in proc.stderr and len(fakes.calls("scontrol")) == 1


@needs_bash
@pytest.mark.parametrize("reason, check_rc, resumed", [
    ("Kill task failed", "0", True),
    ("Prolog error", "1", True),
    ("Kill task failed", "2", False),  # the node is not clean: left drained
    ("gputriage CRITICAL: xid.79", "0", False),  # ours: repair, ack, resume.sh --reason
    ("replacing PSU", "0", False),  # a person's: never touched
])
def test_resume_a_node_a_job_drained(fakes: Fakes, reason: str, check_rc: str,
                                     resumed: bool) -> None:
    out = f"gpu042|2026-12-06T10:00:00|{reason}\\n"
    proc = fakes.run("resume.sh", "--job-fault", FAKE_RC=check_rc, FAKE_SINFO_R=out)
    assert proc.returncode == (0 if resumed else 1), proc.stderr
    assert fakes.calls("gputriage")[0].startswith("check --json")
    assert fakes.calls("scontrol") == (["update nodename=gpu042 state=resume"]
                                       if resumed else [])
    (logged,) = fakes.calls("logger")
    assert ("resumed gpu042" if resumed else "not resumed gpu042") in logged
    assert reason in logged
    # observe-only: says what it would do
    env = fakes.env(FAKE_RC="0", FAKE_SINFO_R=out)
    del env["GPUTRIAGE_DRAIN"]
    proc = subprocess.run(["bash", str(SLURM / "resume.sh"), "--job-fault"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and len(fakes.calls("scontrol")) == int(resumed)


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
    assert proc.stdout.strip() == f"gputriage CRITICAL: {REASON}"
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


# --- resume.sh: acknowledge, check again, resume -----------------------------

def _resume(fakes: Fakes, *args: str, **extra: str) -> subprocess.CompletedProcess:
    fakes.results.mkdir(exist_ok=True)
    shutil.copy(fakes.root / "result.json", fakes.results / "gpu042.json")
    return fakes.run("resume.sh", *args, **extra)


@needs_bash
def test_resume_acks_each_current_critical_with_its_gpu_then_resumes(fakes: Fakes) -> None:
    proc = _resume(fakes, "--reason", "reseated GPU 4, INC-4821", FAKE_RC="0",
                   GPUTRIAGE_ARGS="--deadline 5 --state-dir /srv/gt-state")
    assert proc.returncode == 0, proc.stderr
    state = "--reason reseated GPU 4, INC-4821 --state-dir /srv/gt-state"
    assert fakes.calls("gputriage") == [
        f"ack xid.79 --gpu 0000:9a:00.0 {state}",
        f"ack xid.79 --gpu 0000:ab:00.0 {state}",
        f"ack nvlink.down {state}",  # on three GPUs: by its id alone
        "check --json --deadline 5 --state-dir /srv/gt-state",
    ]
    assert fakes.calls("scontrol") == ["update nodename=gpu042 state=resume"]
    assert "resumed (check exit 0), acknowledged 3 finding(s)" in proc.stdout


@needs_bash
@pytest.mark.parametrize("args, acks", [
    (("xid.79",), ["ack xid.79 --gpu 0000:9a:00.0", "ack xid.79 --gpu 0000:ab:00.0"]),
    (("xid.79", "--gpu", "0000:9a:00.0"), ["ack xid.79 --gpu 0000:9a:00.0"]),
    (("--gpu", "0000:9a:00.0"), ["ack --gpu 0000:9a:00.0"]),
    (("thermal", "gone.id"), ["ack thermal --gpu 0000:db:00.0", "ack gone.id"]),
])
def test_resume_acks_what_it_is_told(fakes: Fakes, args: tuple, acks: list) -> None:
    proc = _resume(fakes, "--reason", "fixed", "--until", "7d", "--by", "ana", *args,
                   FAKE_RC="1")
    assert proc.returncode == 0, proc.stderr
    calls = fakes.calls("gputriage")
    assert calls[:-1] == [f"{a} --reason fixed --until 7d --by ana" for a in acks]
    assert calls[-1].startswith("check --json")
    assert fakes.calls("scontrol") == ["update nodename=gpu042 state=resume"]


@needs_bash
@pytest.mark.parametrize("rc, said", [("2", "still critical after the acknowledgement: "
                                              "nvlink.down,xid.79"),
                                      ("3", "did not conclude (exit 3"),
                                      ("124", "did not conclude (exit 124")])
def test_resume_refuses_what_still_fails(fakes: Fakes, rc: str, said: str) -> None:
    proc = _resume(fakes, "--reason", "reset", FAKE_RC=rc)
    assert proc.returncode == 1
    assert said in proc.stderr
    assert fakes.calls("scontrol") == []
    assert len(fakes.calls("gputriage")) == 4  # the acks stay recorded


@needs_bash
def test_resume_failures_and_usage(fakes: Fakes) -> None:
    proc = _resume(fakes, "--reason", "reset", FAKE_ACK_RC="1")
    assert proc.returncode == 70 and "ack failed" in proc.stderr
    assert fakes.calls("scontrol") == [] and len(fakes.calls("gputriage")) == 1
    proc = _resume(fakes, "--reason", "reset", FAKE_RC="0", FAKE_SCONTROL_RC="1")
    assert proc.returncode == 69
    for args in ((), ("--reason", " "), ("--reason",), ("--bogus", "--reason", "x")):
        assert _resume(fakes, *args).returncode == 64
    assert len(fakes.calls("scontrol")) == 1


@needs_bash
def test_resume_dry_run_runs_nothing(fakes: Fakes) -> None:
    proc = _resume(fakes, "--reason", "reset", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "dry run: gputriage ack xid.79 --gpu 0000:9a:00.0 --reason reset"
    assert lines[-1] == "dry run: scontrol update nodename=gpu042 state=resume"
    assert fakes.calls("gputriage") == [] and fakes.calls("scontrol") == []


# --- the loop with the real gputriage on a scenario host ----------------------

needs_gputriage = pytest.mark.skipif(not GPUTRIAGE.exists(),
                                     reason="no gputriage next to this python")


def _scenario(name: str, where: Path) -> Path:
    out = where / name
    proc = subprocess.run([str(GPUTRIAGE), "scenario", "build", name, "-o", str(out)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    return out


def _later_xid79(snapshot: Path, where: Path) -> Path:
    """A copy of ``snapshot`` whose GPU 0000:9a:00.0 falls off the bus again, later
    than any acknowledgement given now."""
    again = where / "again"
    shutil.copytree(snapshot, again)
    when = (datetime.now(timezone.utc) + timedelta(minutes=10)).strftime("%Y-%m-%dT%H:%M:%S")
    with (again / "sources" / "kernel_log.txt").open("a", encoding="utf-8") as fh:
        fh.write(f"{when}+0000 gpu-node-017 kernel: NVRM: Xid (PCI:0000:9a:00): 79, "
                 "pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n")
    return again


@pytest.mark.slow  # the real check, run 6 times
@needs_bash
@needs_gputriage
def test_repair_ack_resume_loop_with_the_real_check(tmp_path: Path) -> None:
    fakes = Fakes(tmp_path / "fakes")
    lost = _scenario("gpu-fallen-off-bus", tmp_path)
    conf = tmp_path / "healthcheck.conf"

    def use(snapshot: Path) -> None:
        conf.write_text(f"GPUTRIAGE={GPUTRIAGE}\nGPUTRIAGE_ARGS=\"--snapshot {snapshot} "
                        f"--state-dir {tmp_path / 'state'}\"\n", encoding="utf-8")

    use(lost)
    env = {"GPUTRIAGE_HEALTHCHECK_CONF": str(conf)}
    proc = fakes.run("prolog.sh", **env)
    assert proc.returncode == 1, proc.stderr
    (drain,) = fakes.calls("scontrol")
    assert drain.startswith("update nodename=gpu042 state=drain reason=gputriage CRITICAL: "
                            "xid.79 GPU 0000:9a:00.0")

    proc = fakes.run("resume.sh", "--reason", "reseated GPU 4", **env)
    assert proc.returncode == 0, proc.stderr
    assert fakes.calls("scontrol")[1:] == ["update nodename=gpu042 state=resume"]
    proc = fakes.run("prolog.sh", **env)  # the next job's prolog: no drain
    assert proc.returncode == 0, proc.stderr
    assert len(fakes.calls("scontrol")) == 2
    saved = json.loads((fakes.results / "gpu042.json").read_text(encoding="utf-8"))
    assert saved["exit_status"] == 0
    assert {f["status"] for f in saved["findings"] if f["severity"] == "critical"} == {
        "acknowledged"}

    use(_later_xid79(lost, tmp_path))  # it happens again: drained, resume refused
    assert fakes.run("prolog.sh", **env).returncode == 1
    assert "reason=gputriage CRITICAL: xid.79 GPU 0000:9a:00.0" in fakes.calls("scontrol")[2]
    proc = fakes.run("resume.sh", "--reason", "reset again", **env)
    assert proc.returncode == 1 and "refused" in proc.stderr and "xid.79" in proc.stderr
    assert len(fakes.calls("scontrol")) == 3


# --- Kubernetes: cordon on exit 2, ack + check-once + uncordon ----------------

def _daemonset_once(fakes: Fakes, tmp_path: Path, **extra: str) -> subprocess.CompletedProcess:
    """Run the DaemonSet's script for one round: a fake sleep ends the loop."""
    out = tmp_path / "results"
    out.mkdir(exist_ok=True)
    _write_tool(fakes.bin / "sleep", 'kill -TERM "$PPID"\n')
    script = _script("daemonset.yaml").replace("out=/results", f"out={out}")
    env = fakes.env(NODE_NAME="gpu7", GPUTRIAGE_TIMEOUT="30", TMPDIR=str(tmp_path), **extra)
    return subprocess.run(["/bin/sh" if Path("/bin/sh").exists() else "bash", "-c", script],
                          env=env, capture_output=True, text=True, timeout=60)


@needs_bash
def test_daemonset_writes_results_and_leaves_a_check_once(fakes: Fakes,
                                                          tmp_path: Path) -> None:
    proc = _daemonset_once(fakes, tmp_path, FAKE_RC="2")
    assert "gputriage check exit 2" in proc.stdout
    out = tmp_path / "results"
    assert (out / "gpu7.rc").read_text(encoding="utf-8").strip() == "2"
    assert json.loads((out / "gpu7.json").read_text(encoding="utf-8")) == RESULT
    assert not list(out.glob("*.tmp*"))
    once = tmp_path / "check-once"
    env = fakes.env(NODE_NAME="gpu7", GPUTRIAGE_TIMEOUT="30")
    for rc, ok in (("2", False), ("3", False), ("1", True), ("0", True)):
        done = subprocess.run(["sh", str(once)], env={**env, "FAKE_RC": rc},
                              capture_output=True, text=True, timeout=60)
        assert (done.returncode == 0) is ok, rc
    assert fakes.calls("gputriage") == ["check --json --deadline 120"] * 5


def test_cordon_rbac_is_list_get_and_patch_nodes_only() -> None:
    docs = {d["kind"]: d for d in _docs("cordon.yaml")}
    (rule,) = docs["ClusterRole"]["rules"]
    assert rule == {"apiGroups": [""], "resources": ["nodes"],
                    "verbs": ["get", "list", "patch"]}
    # observe-only on first install; one line to enforce (docs/unattended.md)
    assert docs["ConfigMap"]["data"]["GPUTRIAGE_DRAIN"] == "observe"
    (subject,) = docs["ClusterRoleBinding"]["subjects"]
    assert subject["name"] == docs["ServiceAccount"]["metadata"]["name"]
    spec = _pod_spec("cordon.yaml")
    assert spec["serviceAccountName"] == subject["name"]
    (container,) = spec["containers"]
    sc = container["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["privileged"] is False
    assert sc["readOnlyRootFilesystem"] is True and sc["capabilities"]["drop"] == ["ALL"]
    assert all(m.get("readOnly") for m in container["volumeMounts"] if m["name"] == "results")
    assert not any("hostPath" in v for v in spec["volumes"])
    # the per-node pods keep no API access
    for name in WORKLOADS:
        assert _pod_spec(name)["automountServiceAccountToken"] is False


@needs_bash
@pytest.mark.parametrize("name", ("daemonset.yaml",))
def test_more_embedded_scripts_parse(name: str) -> None:
    script = _script(name)
    for shell in ["bash"] + (["/bin/sh"] if Path("/bin/sh").exists() else []):
        proc = subprocess.run([shell, "-n", "-c", script], capture_output=True, text=True,
                              timeout=30)
        assert proc.returncode == 0, (shell, proc.stderr)


# --- watch: Prometheus scrape, Node conditions, node-problem-detector --------------

NPD = DEPLOY / "node-problem-detector"
WATCH_PORT = "9479"


def test_watch_daemonset_serves_metrics_without_api_access() -> None:
    spec = _pod_spec("watch.yaml")
    (container,) = spec["containers"]
    argv = container["command"]
    assert argv[:2] == ["gputriage", "watch"]
    assert argv[argv.index("--listen") + 1] == f":{WATCH_PORT}"
    # the Node condition is opt-in (watch-rbac.yaml): no flag, no account, no token
    assert "--node-conditions" not in argv
    assert "serviceAccountName" not in spec
    assert spec["automountServiceAccountToken"] is False
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    (port,) = container["ports"]
    assert str(port["containerPort"]) == WATCH_PORT and port["name"] == "metrics"
    assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert "livenessProbe" not in container  # a restart would hide a hung GPU, not fix it
    (doc,) = [d for d in _docs("watch.yaml") if d["kind"] == "DaemonSet"]
    (service,) = [d for d in _docs("watch.yaml") if d["kind"] == "Service"]
    for scrape in (doc["spec"]["template"]["metadata"]["annotations"],
                   service["metadata"]["annotations"]):
        assert scrape == {"prometheus.io/scrape": "true",
                               "prometheus.io/port": WATCH_PORT,
                               "prometheus.io/path": "/metrics"}
    assert service["spec"]["selector"] == doc["spec"]["selector"]["matchLabels"]
    assert service["spec"]["clusterIP"] == "None"
    (svc_port,) = service["spec"]["ports"]
    assert svc_port["targetPort"] == "metrics" and str(svc_port["port"]) == WATCH_PORT
    # as daemonset.yaml: GPU nodes, least privilege, the state on the host
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert spec["runtimeClassName"] == "nvidia" and spec["hostNetwork"] is True
    sc = container["securityContext"]
    assert sc["privileged"] is False and sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True and sc["capabilities"]["drop"] == ["ALL"]
    assert set(sc["capabilities"]["add"]) <= {"SYSLOG"}
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert set(volumes) == set(mounts)
    writable = [n for n, m in mounts.items() if "hostPath" in volumes[n] and not m.get("readOnly")]
    assert writable == ["state"] and env["GPUTRIAGE_STATE_DIR"]["value"] == STATE_DIR


def test_watch_rbac_is_get_and_patch_node_status_only() -> None:
    docs = {d["kind"]: d for d in _docs("watch-rbac.yaml")}
    (rule,) = docs["ClusterRole"]["rules"]
    assert rule == {"apiGroups": [""], "resources": ["nodes/status"],
                    "verbs": ["get", "patch"]}
    binding = docs["ClusterRoleBinding"]
    assert binding["roleRef"]["name"] == docs["ClusterRole"]["metadata"]["name"]
    (subject,) = binding["subjects"]
    assert subject["name"] == docs["ServiceAccount"]["metadata"]["name"]
    # watch.yaml says how to turn --node-conditions on with this account
    text = (K8S / "watch.yaml").read_text(encoding="utf-8")
    for step in ("kubectl apply -f deploy/kubernetes/watch-rbac.yaml",
                 f"serviceAccountName: {subject['name']}",
                 "automountServiceAccountToken: true", "--node-conditions"):
        assert step in text, step


def _npd_docs() -> list[dict[str, Any]]:
    with (NPD / "node-problem-detector.yaml").open(encoding="utf-8") as fh:
        return [d for d in yaml.safe_load_all(fh) if d is not None]


def test_npd_daemonset_runs_the_monitor_against_the_watch() -> None:
    config = json.loads((NPD / "gputriage-monitor.json").read_text(encoding="utf-8"))
    docs = {d["kind"]: d for d in _npd_docs()}
    spec = docs["DaemonSet"]["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    flag = next(a for a in container["command"] if a.startswith("--config.custom-plugin"))
    path = flag.split("=", 1)[1]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    config_dir, _, config_file = path.rpartition("/")
    assert config_file == "gputriage-monitor.json"
    assert "configMap" in volumes[mounts[config_dir]]
    # the plugin reads the watch of the same node: host network, the watch's port
    assert spec["hostNetwork"] is True
    for rule in config["rules"]:
        url = rule["args"][rule["args"].index("--from") + 1]
        assert url == f"http://127.0.0.1:{WATCH_PORT}"
    # NPD's built-in role (nodes get, nodes/status patch, events)
    binding = docs["ClusterRoleBinding"]
    assert binding["roleRef"]["name"] == "system:node-problem-detector"
    assert binding["subjects"][0]["name"] == spec["serviceAccountName"]
    sc = container["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["privileged"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert not any("hostPath" in v for v in spec["volumes"])
    # the image: gputriage where the monitor runs it, NPD's binary where the pod does
    dockerfile = (NPD / "Dockerfile").read_text(encoding="utf-8")
    assert container["image"].split("/")[-1].split(":")[0] in dockerfile
    assert "COPY --from=npd /node-problem-detector /node-problem-detector" in dockerfile
    assert container["command"][0] == "/node-problem-detector"
    # host network: its own endpoints off NPD's default ports, which a node's NPD holds
    flags = dict(a.split("=", 1) for a in container["command"] if a.startswith("--")
                 and "=" in a)
    ports = {int(flags["--port"]), int(flags["--prometheus-port"])}
    assert len(ports) == 2 and not ports & {20256, 20257, int(WATCH_PORT)}
    assert "pip install" in dockerfile and all(
        r["path"] == "/usr/local/bin/gputriage" for r in config["rules"])
