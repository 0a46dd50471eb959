"""The herd at start: many replicas of a GPU workload each fetching the same large
weights, or pulling the same multi-GB image, over one shared link.

Figures are estimates and say so: a model's size from its name (``Llama-3-70B`` in
FP16 is ~140 GB) or the ``gputriage.io/model-size`` annotation; an image's size from
well-known names (NGC PyTorch, Triton, NeMo, vLLM, TGI, SGLang, NIM) or the
``gputriage.io/image-size`` annotation; the shared link is the rate given with
``k8s lint --link`` (storage or registry egress), else an assumed 25 Gb/s, which the
finding says.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from gputriage.model import Action, Blame, Finding, Severity
from gputriage.parsers.k8s_model import Cluster, quantity
from gputriage.rules.base import finding, rule
from gputriage.rules.k8s_common import object_scope
from gputriage.rules.k8s_workloads import (
    IMAGE_SIZE_ANNOTATION,
    Container,
    Workload,
    model_names,
    model_size_gb,
    most_pods,
    say_gb,
    workloads,
)

LINK_GBITS = 25.0  # assumed storage / registry egress shared by the replicas, Gb/s
HERD_SECONDS = 300  # a start of every replica longer than this is a herd worth fixing
_DOWNLOAD = re.compile(r"(?i)huggingface-cli\s+download|\bhf\s+download|snapshot_download|"
                       r"hf_hub_download|\bs3\s+(?:cp|sync)|s5cmd|gsutil\b.*\b(?:cp|rsync)|"
                       r"gcloud\s+storage\s+cp|azcopy|rclone\s+(?:copy|sync)|\bwget\b|\bcurl\b")
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
# well-known multi-GB images: (name prefix, compressed size in GB, order of magnitude)
BIG_IMAGES: tuple[tuple[str, float], ...] = (
    ("nvcr.io/nvidia/nemo", 20.0), ("nvcr.io/nvidia/pytorch", 10.0),
    ("nvcr.io/nvidia/tritonserver", 8.0), ("nvcr.io/nvidia/tensorflow", 8.0),
    ("nvcr.io/nim/", 10.0), ("vllm/vllm-openai", 8.0), ("docker.io/vllm/vllm-openai", 8.0),
    ("lmsysorg/sglang", 10.0), ("ghcr.io/huggingface/text-generation-inference", 5.0),
    ("pytorch/pytorch", 4.0), ("nvcr.io/nvidia/cuda", 4.0), ("nvidia/cuda", 4.0))


def _cached(w: Workload, c: Container) -> str | None:
    """The node-local or shared cache a container reads its weights from, if any: a
    hostPath, a PVC, a CSI or image volume mounted in it."""
    for t in w.templates:
        vols = t.volumes()
        for m in c.raw.get("volumeMounts") or []:
            vol = vols.get(str(m.get("name"))) if isinstance(m, dict) else None
            if vol is None:
                continue
            for kind in ("hostPath", "persistentVolumeClaim", "csi", "image", "nfs"):
                if kind in vol:
                    return f"{kind} volume {vol.get('name')} at {m.get('mountPath')}"
    return None


def _fetches(w: Workload) -> list[tuple[Container, str]]:
    """The containers that fetch weights at start and how: a download command, or a
    server given a Hub model id it fetches itself."""
    out: list[tuple[Container, str]] = []
    for c in w.containers():
        if _cached(w, c):
            continue
        m = _DOWNLOAD.search(c.text)
        if m:
            out.append((c, m.group(0)))
            continue
        if c.init or not c.gpus() or c.env.get("HF_HUB_OFFLINE") in ("1", "true"):
            continue
        hub = [n for n in model_names(c) if _HUB_ID.match(n)]
        if hub:
            out.append((c, f"Hub model {hub[0]} fetched by the server at start"))
    return out


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 120 else f"{seconds:.0f} s"


def link_words(given: float | None) -> tuple[float, str]:
    """The shared link's rate in Gb/s and how the findings name it: as given, or the
    assumed default, saying so."""
    if given is not None and given > 0:
        return given, f"the given {given:g} Gb/s link"
    return LINK_GBITS, (f"an assumed {LINK_GBITS:g} Gb/s link (state the real rate with "
                        "gputriage k8s lint --link RATE)")


@rule("k8s.herd-weights", produces=("k8s.lint-weights-herd",))
def lint_weights_herd(cluster: Cluster,
                      shared_link_gbits: float | None = None) -> Iterator[Finding]:
    """Replicas of a GPU workload that each download the same large weights at start
    (init containers or commands running huggingface-cli download, snapshot_download,
    s3 cp, gsutil, wget, curl; a server given a Hub model id) with no node-local or
    shared cache: size x replicas over the shared link (``--link``, else an assumed
    25 Gb/s), and the time to start them all. Information when the size cannot be
    told."""
    gbits, link = link_words(shared_link_gbits)
    link_gbs = gbits / 8
    for w in workloads(cluster):
        if w.gpus() <= 0 or w.partial:
            continue
        fetches = _fetches(w)
        pods, why = most_pods(cluster, w)
        if not fetches or pods < 2:
            continue
        c, how = fetches[0]
        size = model_size_gb(w, c) or model_size_gb(w)
        lines = [w.say(f"{c.path}.{'args' if c.raw.get('args') else 'command'}",
                       " ".join(c.words) or c.env), w.say("replicas", why)]
        fix = ("Fetch once per node, not once per pod: a node-local cache (hostPath or a "
               "local PV on NVMe) filled by a pre-pull DaemonSet, or a ReadOnlyMany PVC (or "
               "an image volume) holding the weights; load safetensors from it (mmap-able, "
               "no copy), and roll replicas out in batches (maxSurge).")
        if size is None:
            yield finding(
                "k8s.lint-weights-herd", Severity.INFO,
                f"{w.ref}: {pods} replicas each fetch their weights at start ({how})",
                f"Each of up to {pods} pods ({why}) downloads the same weights when it "
                "starts, over the same link; their size could not be told (state it with "
                f"the annotation gputriage.io/model-size). {fix}",
                Action.FIX_CONFIG, Blame.JOB_CONFIG, object_scope(w.kind, w.name, w.namespace),
                [w.evidence(lines)])
            continue
        gb, told = size
        total = gb * pods
        seconds = total / link_gbs
        if seconds < HERD_SECONDS:
            continue
        yield finding(
            "k8s.lint-weights-herd", Severity.WARNING,
            f"{w.ref}: {pods} replicas each download ~{say_gb(gb)} of weights at start: "
            f"~{say_gb(total)}, {_minutes(seconds)} over a {gbits:g} Gb/s link",
            f"The weights are ~{say_gb(gb)} ({told}); {c.name} ({c.path}) fetches them at "
            f"every start ({how}), and up to {pods} pods start together ({why}): "
            f"{pods} x {say_gb(gb)} = {say_gb(total)} through {link} ({link_gbs:.1f} GB/s) "
            f"is {_minutes(seconds)} before the last replica serves, each getting "
            f"~{gbits / pods:.1f} Gb/s; a rollout, "
            "a node drain or a scale-up repeats it"
            + ("." if c.init else ", and probes may kill the servers mid-download.")
            + f" {fix}",
            Action.FIX_CONFIG, Blame.JOB_CONFIG, object_scope(w.kind, w.name, w.namespace),
            [w.evidence(lines)])


def _image_size(w: Workload, image: str) -> tuple[float, str] | None:
    stated = w.annotation(IMAGE_SIZE_ANNOTATION)
    if stated and quantity(stated):
        return (quantity(stated) or 0.0) / 1e9, f"{IMAGE_SIZE_ANNOTATION}={stated}"
    name = image.split("@")[0]
    for prefix, gb in BIG_IMAGES:
        if name.startswith(prefix) and (not prefix.endswith("cuda") or "devel" in name):
            return gb, f"{prefix} images are of the order of {gb:g} GB compressed"
    return None


def _tag(image: str) -> str | None:
    if "@" in image:
        return "digest"
    last = image.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else None


def _policy(c: Container) -> tuple[str, bool]:
    """The pull policy (as the API defaults it) and whether the tag is mutable."""
    tag = _tag(c.image)
    mutable = tag in (None, "latest")
    raw: Any = c.raw.get("imagePullPolicy")
    return (str(raw) if raw else ("Always" if mutable else "IfNotPresent")), mutable


@rule("k8s.herd-pull", produces=("k8s.lint-pull-always",))
def lint_pull_always(cluster: Cluster,
                     shared_link_gbits: float | None = None) -> Iterator[Finding]:
    """``imagePullPolicy: Always`` (or a :latest or untagged image, which defaults to it)
    on a multi-GB GPU image with several replicas: a warning when the tag can move (each
    start after a push pulls gigabytes on every node at once, and replicas run different
    builds), information for a pinned tag (a registry round trip at every start)."""
    gbits, link = link_words(shared_link_gbits)
    for w in workloads(cluster):
        pods, why = most_pods(cluster, w)
        if pods < 2 or w.gpus() <= 0:
            continue
        for c in w.containers():
            policy, mutable = _policy(c)
            size = _image_size(w, c.image)
            if policy != "Always" or size is None:
                continue
            gb, told = size
            total = gb * pods
            yield finding(
                "k8s.lint-pull-always", Severity.WARNING if mutable else Severity.INFO,
                f"{w.ref}: imagePullPolicy Always on {c.image} (~{gb:g} GB) for {pods} "
                "replicas",
                f"{told}. With imagePullPolicy Always the kubelet asks the registry at every "
                f"container start; "
                + (f"with the tag {_tag(c.image) or '(none: latest)'} able to move, every "
                   f"start after a push pulls it again: up to {pods} x ~{gb:g} GB = "
                   f"~{total:g} GB ({_minutes(total / (gbits / 8))} over {link}), and "
                   "replicas started before and after run different builds. " if mutable else
                   "a pinned tag is not pulled again, but each start waits on the registry "
                   "and fails while it is unreachable. ")
                + "Pin the image (a version tag or @sha256 digest) with imagePullPolicy: "
                "IfNotPresent, and pre-pull it on the GPU nodes (a DaemonSet or the node "
                "image).",
                Action.FIX_CONFIG, Blame.JOB_CONFIG, object_scope(w.kind, w.name, w.namespace),
                [w.evidence([w.say(f"{c.path}.image", c.image),
                             w.say(f"{c.path}.imagePullPolicy",
                                   c.raw.get("imagePullPolicy") or f"(default: {policy})"),
                             w.say("replicas", why)])])
            break

