"""The ``gputriage/weights/v1`` document and its terminal rendering."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gputriage.text.units import (
    DTYPE_BYTES,
    REPORTED,
)
from gputriage.weights import plan
from gputriage.weights.arch import ModelConfig, kv_bytes_per_token
from gputriage.weights.files import ModelFiles
from gputriage.weights.measure import Measured

__all__ = ["SCHEMA", "Inputs", "build"]

SCHEMA = "gputriage/weights/v1"


@dataclass
class Inputs:
    """What the command was given and what it read."""

    files: ModelFiles | None = None
    params: int | None = None
    dtype: str | None = None  # the --dtype asked for; None: as stored
    config: ModelConfig | None = None
    context: int = 4096
    batch: int = 1
    kv_dtype: str = "fp16"
    overhead: float = 0.10
    gpus: tuple[plan.GpuSku, ...] = ()
    bandwidth: dict[str, float] = field(default_factory=dict)
    origin: dict[str, str] = field(default_factory=dict)  # tier -> assumed|stated|measured
    measured: Measured | None = None
    replicas: int | None = None
    per_node: int = 1
    link: float | None = None
    source: str = "object_store"


def _model(inp: Inputs) -> dict[str, Any]:
    files = inp.files
    config = inp.config or (files.config if files else None)
    params = inp.params if inp.params is not None else (files.parameters if files else None)
    if params is None and config is not None:
        params = config.parameters()
    stored = files if files is not None and files.files else None  # config.json alone: none
    return {
        "from": "files" if files is not None else "params",
        "paths": [f.path for f in files.files] if files else [],
        "parameters": params,
        "parameters_from": ("--params" if inp.params is not None else "headers"
                            if files is not None and files.parameters is not None
                            else "config.json" if config is not None else None),
        "file_bytes": stored.file_bytes if stored else None,
        "tensor_bytes": stored.tensor_bytes if stored else None,
        "stored_dtypes": files.dtypes if files else {},
        "formats": sorted({f.format for f in files.files}) if files else [],
        "config": None if config is None else {
            "model_type": config.model_type, "layers": config.layers,
            "hidden": config.hidden, "heads": config.heads, "kv_heads": config.kv_heads,
            "head_dim": config.head_dim, "vocab": config.vocab,
            "intermediate": config.intermediate, "experts": config.experts,
            "dtype": config.dtype, "max_context": config.max_context,
            "parameters_estimate": config.parameters()},
        "notes": list(files.notes) if files else [],
    }


def _weights_bytes(inp: Inputs, model: dict[str, Any]) -> tuple[float, str]:
    """GPU bytes of the weights, and in what dtype."""
    params = model["parameters"]
    if inp.dtype is not None and params is not None:
        return params * DTYPE_BYTES[inp.dtype], inp.dtype
    if model["tensor_bytes"]:
        stored = model["stored_dtypes"]  # none: a file without a header (.bin)
        label = f"as stored ({max(stored, key=stored.get)})" if stored else "as stored"
        return float(model["tensor_bytes"]), label
    config = model["config"]
    dtype = (config or {}).get("dtype") or "bf16"
    return float((params or 0) * DTYPE_BYTES[dtype]), dtype


def build(inp: Inputs) -> dict[str, Any]:
    """The whole document (host findings are added by the command)."""
    from gputriage import __version__

    model = _model(inp)
    weights, dtype = _weights_bytes(inp, model)
    config = inp.config or (inp.files.config if inp.files else None)
    per_token = kv_bytes_per_token(config, DTYPE_BYTES[inp.kv_dtype]) if config else None
    kv = per_token * inp.context * inp.batch if per_token else 0.0
    need = plan.Need(weights, kv, inp.overhead)
    params = model["parameters"]
    disk = float(model["file_bytes"] or weights)
    doc: dict[str, Any] = {
        "schema": SCHEMA, "tool_version": __version__, "model": model,
        "memory": {
            "dtype": dtype, "weights_bytes": weights,
            "per_dtype": {d: params * DTYPE_BYTES[d] for d in REPORTED} if params else {},
            "kv_dtype": inp.kv_dtype, "kv_bytes_per_token": per_token,
            "context": inp.context, "batch": inp.batch, "kv_cache_bytes": kv,
            "overhead": inp.overhead, "total_bytes": need.total},
        "fit": [{"sku": f.sku.sku, "memory_gb": f.sku.memory_gb, "node_gpus": f.sku.node_gpus,
                 "tp": f.tp, "per_gpu_bytes": f.per_gpu, "nodes": f.nodes}
                for f in plan.fits(need, inp.gpus, config.heads if config else None,
                                   config.kv_heads if config else None)],
        "load": {"bytes": disk,
                 "tiers": {t: {"bytes_per_s": inp.bandwidth[t], "origin": inp.origin[t],
                               "seconds": s}
                           for t, s in plan.load_times(disk, inp.bandwidth).items()}},
        "measure": None, "herd": None, "host": None,
    }
    if inp.measured is not None:
        m = inp.measured
        doc["measure"] = {"path": m.path, "bytes_read": m.bytes_read, "seconds": m.seconds,
                          "bytes_per_s": m.bytes_per_s, "direct": m.direct, "note": m.note}
    if inp.replicas is not None and inp.link is not None:
        rows = plan.herd(disk, inp.replicas, inp.link, inp.bandwidth, inp.source, inp.per_node)
        doc["herd"] = {"replicas": inp.replicas, "per_node": inp.per_node,
                       "link_bytes_per_s": inp.link, "source": inp.source,
                       "total_bytes": inp.replicas * disk,
                       "severity": plan.herd_verdict(rows), "warn_after_s": plan.HERD_WARN_S,
                       "rows": [{"strategy": r.strategy, "link_bytes": r.link_bytes,
                                 "ready_s": r.ready_s, "ahead_s": r.ahead_s, "note": r.note}
                                for r in rows]}
    return doc
