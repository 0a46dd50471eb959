"""``gputriage weights``: a model's size on disk and in GPU memory, the GPUs it fits,
its load time per storage tier, the herd of replicas starting together, and (with
--model-dir) where this host keeps it."""

from __future__ import annotations

from typing import Any

import click

from gputriage.commands.common import (
    CommandExit,
    StrictFloatRange,
    StrictIntRange,
    current_env,
    html_option,
    quiet_option,
)

_TIER_NAMES = {"local_nvme": "local_nvme", "nvme": "local_nvme", "local": "local_nvme",
               "page_cache": "page_cache", "cache": "page_cache", "nfs": "nfs",
               "object_store": "object_store", "object": "object_store", "s3": "object_store"}
_TIER = click.Choice(["local_nvme", "page_cache", "nfs", "object_store"])


def _convert(parse: Any, text: str, hint: str) -> Any:
    try:
        return parse(text)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=hint) from None


def _bandwidths(stated: tuple[str, ...]) -> tuple[dict[str, float], dict[str, str]]:
    from gputriage.text.units import parse_rate
    from gputriage.weights.plan import DEFAULT_BANDWIDTH

    rates, origin = dict(DEFAULT_BANDWIDTH), dict.fromkeys(DEFAULT_BANDWIDTH, "assumed")
    for item in stated:
        name, sep, rate = item.partition("=")
        tier = _TIER_NAMES.get(name.strip().lower())
        if not sep or tier is None:
            raise click.BadParameter(f"{item!r}: write TIER=RATE, TIER one of "
                                     "local_nvme, page_cache, nfs, object_store",
                                     param_hint="--bandwidth")
        rates[tier] = _convert(parse_rate, rate, "--bandwidth")
        origin[tier] = "stated"
    return rates, origin


def _gpus(wanted: tuple[str, ...]) -> tuple[Any, ...]:
    from gputriage.weights.plan import gpu_skus

    skus = gpu_skus()
    if not wanted:
        return skus
    chosen: tuple[Any, ...] = ()
    for want in (w.strip().lower() for w in wanted):  # exact name first, else a part of it
        exact = [s for s in skus if s.sku.lower() == want]
        chosen += tuple(s for s in exact or [s for s in skus if want in s.sku.lower()]
                        if s not in chosen)
    chosen = tuple(s for s in skus if s in chosen)  # in table order
    if not chosen:
        raise click.BadParameter(f"no GPU named {', '.join(wanted)} (known: "
                                 f"{', '.join(s.sku for s in skus)})", param_hint="--gpu")
    return chosen


def _measure(path: str, limit_text: str, tier: str | None) -> tuple[Any, str]:
    """The bounded read, and the tier it stands for (the path's mount when not told)."""
    from gputriage.text.units import parse_size
    from gputriage.weights.measure import MIN_LIMIT, measure_read, pick_file

    limit = int(_convert(parse_size, limit_text, "--measure-bytes"))
    if limit < MIN_LIMIT:
        raise click.BadParameter(f"{limit_text!r} is under 4 KiB (one page of a direct "
                                 "read); 1GB reads a bandwidth", param_hint="--measure-bytes")
    measured = measure_read(pick_file(path), limit)
    if tier is None:
        import os

        from gputriage.parsers.weights_host import classify_mount, parse_mountinfo
        from gputriage.weights.host import mount_of

        try:
            with open("/proc/self/mountinfo", encoding="utf-8") as fh:
                mount = mount_of(os.path.realpath(path), parse_mountinfo(fh.read()))
        except (OSError, ValueError):
            mount = None
        kind = classify_mount(mount) if mount is not None else "local_nvme"
        tier = {"nfs": "nfs", "lustre": "nfs", "network": "nfs", "object_store": "object_store",
                "memory": "page_cache"}.get(kind, "local_nvme")
    return measured, tier


def _adopt(inp: Any, measured: Any, tier: str) -> None:
    """The measured bandwidth stands for ``tier`` unless stated, or too few bytes were
    read (the note then says why)."""
    import dataclasses

    from gputriage.weights.measure import not_usable
    from gputriage.weights.plan import TIER_LABEL

    inp.measured = measured
    why = not_usable(measured)
    if why is not None:
        note = f"not used for {TIER_LABEL[tier]}: {why}"
        inp.measured = dataclasses.replace(
            measured, note=f"{measured.note}; {note}" if measured.note else note)
    elif inp.origin[tier] != "stated":
        inp.bandwidth[tier], inp.origin[tier] = measured.bytes_per_s, "measured"


def _files(sources: list[str], only_host: str | None, stage_dir: str | None,
           env: Any) -> Any:
    """The model's files; with ``only_host`` (``--host-report`` of that directory), a
    model that cannot be read (not staged yet, a bad file) still gets its host report,
    sized by the weights files there, if any."""
    from gputriage.errors import InputError
    from gputriage.weights.files import read_model, weights_files_bytes

    try:
        return read_model(sources)
    except InputError:
        if only_host is None:
            raise
    env.stdout.write(_host(only_host, weights_files_bytes(only_host), stage_dir)[0])
    raise CommandExit(0)


def _host(model_dir: str, model_bytes: float | None,
          stage_dir: str | None) -> tuple[str, dict]:
    """The host report of --model-dir and what the weights rules say of it."""
    from gputriage.engine.analysis import analyze
    from gputriage.parsers.weights_host import parse_weights_host
    from gputriage.results.document import plain
    from gputriage.snapshot.bundle import Captured, Snapshot
    from gputriage.weights.host import host_report

    text = host_report(model_dir, None if model_bytes is None else int(model_bytes),
                       stage_dir=stage_dir)
    snap = Snapshot({"weights_host": Captured("weights_host", text, {"error": None},
                                              "weights --model-dir")}, None, "weights")
    result = analyze(snap)
    found = [f for f in result.sorted_findings() if f.id.startswith("weights.")]
    parsed = parse_weights_host(text)
    return text, {"model_dir": parsed.model_dir, "tier": parsed.tier,
                  "fs_type": parsed.mount.fs_type if parsed.mount else None,
                  "report": text, "findings": [plain(f.to_json()) for f in found]}


def _numbers(inp: Any, params: str | None, dtype: str | None, kv_dtype: str,
             link: str | None, bandwidth: tuple[str, ...]) -> None:
    """The options written as numbers with units, into ``inp`` (usage errors when bad)."""
    from gputriage.text.units import normalise_dtype, parse_params, parse_rate

    for option, value in (("--dtype", dtype), ("--kv-dtype", kv_dtype)):
        if value is not None and normalise_dtype(value) is None:
            raise click.BadParameter(f"unknown dtype {value!r} (fp32, bf16, fp16, fp8, int8, "
                                     "int4)", param_hint=option)
    inp.dtype = normalise_dtype(dtype) if dtype else None
    inp.kv_dtype = normalise_dtype(kv_dtype) or "fp16"
    if params is not None:
        inp.params = _convert(parse_params, params, "--params")
    if link is not None:
        inp.link = _convert(parse_rate, link, "--link")
    inp.bandwidth, inp.origin = _bandwidths(bandwidth)


@click.command("weights")
@click.argument("model", nargs=-1, type=click.Path(), metavar="[MODEL]...")
@click.option("--params", default=None, metavar="N", help="Parameter count when no files "
              "are at hand: 70B, 8B, 125M.")
@click.option("--dtype", default=None, metavar="DTYPE", help="Weights dtype in GPU memory: "
              "fp32, bf16, fp16, fp8, int8, int4 (default: as stored, else bf16).")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              metavar="FILE", help="A config.json for the shape (KV cache, heads).")
@click.option("--context", type=StrictIntRange(min=1), default=4096, show_default=True,
              help="Tokens of context per sequence for the KV cache.")
@click.option("--batch", type=StrictIntRange(min=1), default=1, show_default=True,
              help="Sequences held at once for the KV cache.")
@click.option("--kv-dtype", default="fp16", show_default=True, metavar="DTYPE",
              help="KV cache dtype.")
@click.option("--overhead", type=StrictFloatRange(0, 0.9), default=0.10, show_default=True,
              help="Share of each GPU's memory kept for the CUDA context, activations and "
                   "fragmentation.")
@click.option("--gpu", "gpu_names", multiple=True, metavar="NAME",
              help="Only these GPU models in the fit table (H100, A100 80GB...).")
@click.option("--bandwidth", multiple=True, metavar="TIER=RATE",
              help="A tier's read bandwidth: local_nvme, page_cache, nfs, object_store "
                   "(nfs=1.2GB/s, object_store=400MB/s).")
@click.option("--measure", "measure_path", type=click.Path(), default=None, metavar="PATH",
              help="Measure sequential read bandwidth on this file (a directory: its largest "
                   "file): bounded, O_DIRECT where possible, never writing.")
@click.option("--measure-bytes", default="1GB", show_default=True, metavar="SIZE",
              help="Read at most this much for --measure.")
@click.option("--measure-tier", type=_TIER, default=None,
              help="The tier --measure stands for (default: from the path's mount).")
@click.option("--replicas", type=StrictIntRange(min=1), default=None,
              help="Replicas starting together (needs --link).")
@click.option("--per-node", type=StrictIntRange(min=1), default=1, show_default=True,
              help="Replicas that share a node (and a node-local cache).")
@click.option("--link", default=None, metavar="RATE",
              help="The shared link the replicas pull through: 100Gb/s, 400Gb/s, 12GB/s.")
@click.option("--source", type=_TIER, default="object_store", show_default=True,
              help="Where the replicas pull from.")
@click.option("--model-dir", type=click.Path(), default=None, metavar="DIR",
              help="Check where this host keeps the model: the mount's file-system type, "
                   "free space here and on local NVMe, RAM for the page cache.")
@click.option("--stage-dir", type=click.Path(), default=None, metavar="DIR",
              help="Where weights would be staged (default: the local NVMe mount with the "
                   "most free space, else the local disk's).")
@click.option("--host-report", is_flag=True, help="Print only the host report of "
              "--model-dir (gputriage analyze and check read it).")
@click.option("--json", "as_json", is_flag=True,
              help="Print the result as JSON (schema gputriage/weights/v1).")
@html_option
@quiet_option
def weights(model: tuple[str, ...], params: str | None, dtype: str | None,
            config_path: str | None, context: int, batch: int, kv_dtype: str,
            overhead: float, gpu_names: tuple[str, ...], bandwidth: tuple[str, ...],
            measure_path: str | None, measure_bytes: str, measure_tier: str | None,
            replicas: int | None, per_node: int, link: str | None, source: str,
            model_dir: str | None, stage_dir: str | None, host_report: bool,
            as_json: bool, html: str | None, quiet: bool) -> None:
    """Size a model from its files (safetensors, sharded index, GGUF, .bin/.pt,
    config.json) or from --params; its GPU memory with the KV cache, the smallest
    tensor-parallel degree per GPU model, the load time per storage tier, and with
    --replicas N --link RATE the herd: N replicas starting together over one link, and
    how staging to local NVMe, a node-local cache or a pre-pull DaemonSet changes it.
    MODEL: a model directory or files; --model-dir also checks where this host keeps it.

    Exit status 0; 1 when the herd keeps the last replica waiting over 5 minutes, or
    with --model-dir when the host check warns."""
    from gputriage.weights.report import Inputs, build

    env = current_env()
    if replicas is not None and link is None:
        raise click.UsageError("--replicas needs --link (the shared link's rate)")
    if host_report and model_dir is None:
        raise click.UsageError("--host-report needs --model-dir")
    sources = list(model) or ([model_dir] if model_dir and params is None else [])
    if not sources and params is None and config_path is None:
        raise click.UsageError("name a model directory or files, or give --params")
    inp = Inputs(context=context, batch=batch, overhead=overhead, per_node=per_node,
                 source=source, replicas=replicas, gpus=_gpus(gpu_names))
    _numbers(inp, params, dtype, kv_dtype, link, bandwidth)
    if config_path is not None:
        from gputriage.weights.files import read_model

        inp.config = read_model([config_path]).config
    if sources:
        only_host = model_dir if host_report and not model else None
        inp.files = _files(sources, only_host, stage_dir, env)
    if measure_path is not None:
        _adopt(inp, *_measure(measure_path, measure_bytes, measure_tier))
    doc = build(inp)
    status = 0
    if model_dir is not None:
        text, doc["host"] = _host(model_dir, doc["load"]["bytes"], stage_dir)
        if host_report:
            env.stdout.write(text)
            raise CommandExit(0)
        severities = {f["severity"] for f in doc["host"]["findings"]}
        status = 2 if "critical" in severities else 1 if "warning" in severities else 0
    if doc["herd"] is not None and doc["herd"]["severity"] == "warning":
        status = max(status, 1)  # a herd past the threshold is a warning, never a green OK
    if html is not None:
        from gputriage.commands.common import save_html
        from gputriage.views.html.weights import weights_html

        save_html(html, lambda: weights_html(doc), quiet=quiet)
    if as_json:
        env.write_json(doc)
    elif quiet:
        from gputriage.views.weightsview import weights_line

        env.stdout.write(weights_line(doc, status) + "\n")
    else:
        from gputriage.views.console import make_console
        from gputriage.views.weightsview import print_weights

        print_weights(make_console(env.stdout), doc)
    raise CommandExit(status)
