"""gputriage weights: sizes from real safetensors / GGUF files, the arithmetic against
hand-computed cases (public config.json numbers), the bounded read, the command."""

from __future__ import annotations

import io
import json
import math
import os
import struct
from pathlib import Path
from typing import Any

import pytest

from gputriage.cli import EXIT_INPUT, EXIT_USAGE, Environment, main
from gputriage.errors import InputError
from gputriage.text.units import dtype_bytes, parse_params, parse_rate, parse_size
from gputriage.weights import plan
from gputriage.weights.arch import kv_bytes_per_token, parse_config
from gputriage.weights.files import read_model, read_safetensors_header
from gputriage.weights.measure import measure_read

np = pytest.importorskip("numpy")

# numbers of public config.json files (facts): Meta-Llama-3-70B, Meta-Llama-3-8B,
# Mistral-7B-v0.1, Mixtral-8x7B-v0.1
LLAMA3_70B = {"model_type": "llama", "num_hidden_layers": 80, "hidden_size": 8192,
              "num_attention_heads": 64, "num_key_value_heads": 8, "vocab_size": 128256,
              "intermediate_size": 28672, "max_position_embeddings": 8192,
              "torch_dtype": "bfloat16", "tie_word_embeddings": False}
LLAMA3_8B = {**LLAMA3_70B, "num_hidden_layers": 32, "hidden_size": 4096,
             "num_attention_heads": 32, "intermediate_size": 14336}
MISTRAL_7B = {**LLAMA3_8B, "model_type": "mistral", "vocab_size": 32000,
              "max_position_embeddings": 32768}
MIXTRAL_8X7B = {**MISTRAL_7B, "model_type": "mixtral", "num_local_experts": 8}


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(argv, Environment(stdout=out, stderr=err))
    return code, out.getvalue(), err.getvalue()


# --- units and arithmetic ----------------------------------------------------------------
def test_dtype_table() -> None:
    assert [dtype_bytes(d) for d in ("fp32", "bf16", "fp16", "fp8", "int8", "int4")] == [
        4, 2, 2, 1, 1, 0.5]
    assert dtype_bytes("torch.bfloat16") == 2 and dtype_bytes("F8_E4M3") == 1
    with pytest.raises(ValueError):
        dtype_bytes("fp7")


def test_units() -> None:
    assert parse_params("70B") == 70_000_000_000 and parse_params("125M") == 125_000_000
    assert parse_params("7.5b") == 7_500_000_000 and parse_params("8e9") == 8_000_000_000
    assert parse_rate("100Gb/s") == 12.5e9 and parse_rate("25Gbps") == 3.125e9
    assert parse_rate("1.2GB/s") == 1.2e9 and parse_rate("800MiB/s") == 800 * 2**20
    assert parse_size("140GB") == 140e9 and parse_size("1GiB") == 2**30
    for bad in ("seventy", "70X", "-5B", "0"):
        with pytest.raises(ValueError):
            parse_params(bad)
    for bad in ("100", "fast", "100Gb", "0GB/s"):
        with pytest.raises(ValueError):
            parse_rate(bad)


def test_70b_fp16_is_140_gb_and_the_herd_of_50_takes_560_s() -> None:
    weights = parse_params("70B") * dtype_bytes("fp16")
    assert weights == 140e9
    rows = plan.herd(weights, 50, parse_rate("100Gb/s"), dict(plan.DEFAULT_BANDWIDTH))
    direct = rows[0]
    assert direct.link_bytes == 7e12
    assert direct.ready_s == pytest.approx(560.0)  # 7 TB × 8 / 100 Gb/s: 9 min 20 s
    staged = rows[2]
    assert staged.ready_s == pytest.approx(140e9 / plan.DEFAULT_BANDWIDTH["local_nvme"])
    assert staged.ahead_s == pytest.approx(560.0)
    cache = plan.herd(weights, 48, 12.5e9, dict(plan.DEFAULT_BANDWIDTH), per_node=8)[1]
    assert cache.link_bytes == 6 * 140e9  # one pull per node of 8 replicas


def test_configs_of_public_models() -> None:
    llama70 = parse_config(LLAMA3_70B)
    assert llama70.parameters() == 70_553_706_496
    assert kv_bytes_per_token(llama70, 2) == 2 * 80 * 8 * 128 * 2 == 327_680
    assert parse_config(LLAMA3_8B).parameters() == 8_030_261_248
    assert kv_bytes_per_token(parse_config(LLAMA3_8B), 2) == 131_072
    assert parse_config(MISTRAL_7B).parameters() == 7_241_732_096
    assert parse_config(MIXTRAL_8X7B).parameters() == 46_702_792_704
    assert parse_config({"text_config": LLAMA3_8B}).layers == 32
    with pytest.raises(ValueError, match="num_hidden_layers"):
        parse_config({"hidden_size": 10})


def test_fit_takes_the_smallest_degree_per_gpu() -> None:
    skus = {s.sku: s for s in plan.gpu_skus()}
    need = plan.Need(140e9, 0.0, 0.10)
    fits = {f.sku.sku: f for f in plan.fits(need, tuple(skus.values()), heads=64)}
    assert fits["H100 SXM"].tp == 2 and fits["H100 SXM"].per_gpu == 70e9  # 70 <= 72
    assert fits["A100 40GB"].tp == 4 and fits["B200"].tp == 1
    assert fits["V100 16GB"].tp == 16 and fits["V100 16GB"].nodes == 2  # not one node
    kv = 327_680 * 8192 * 32  # Llama-3-70B, 8k context, batch 32: 85.9 GB
    big = {f.sku.sku: f for f in plan.fits(plan.Need(141e9, kv, 0.1), (skus["H100 SXM"],))}
    assert big["H100 SXM"].tp == 4
    assert all(s.memory_gb > 0 and s.node_gpus >= 1 for s in skus.values())


# --- files ---------------------------------------------------------------------------------
def _bf16_shard(path: Path, tensors: dict[str, list[int]]) -> None:
    """A safetensors file of BF16 tensors, header written as the format documents it
    (numpy has no bfloat16)."""
    header, offset = {}, 0
    for name, shape in tensors.items():
        size = math.prod(shape) * 2
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(offset))


@pytest.fixture()
def sharded(tmp_path: Path) -> Path:
    from safetensors.numpy import save_file

    save_file({"embed": np.zeros((64, 16), np.float32), "norm": np.ones(16, np.float16)},
              str(tmp_path / "model-00001-of-00003.safetensors"), metadata={"format": "np"})
    save_file({"q": np.zeros((16, 16), np.int8), "k": np.zeros((16, 4), np.float16)},
              str(tmp_path / "model-00002-of-00003.safetensors"))
    _bf16_shard(tmp_path / "model-00003-of-00003.safetensors", {"o": [16, 16], "head": [64, 3]})
    names = {"embed": 1, "norm": 1, "q": 2, "k": 2, "o": 3, "head": 3}
    index = {"metadata": {"total_size": 0}, "weight_map": {
        k: f"model-0000{v}-of-00003.safetensors" for k, v in names.items()}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    (tmp_path / "config.json").write_text(json.dumps(LLAMA3_8B))
    (tmp_path / "pytorch_model.bin").write_bytes(b"\0" * 100)  # not counted: a duplicate
    return tmp_path


def test_a_sharded_safetensors_directory_is_sized_to_the_byte(sharded: Path) -> None:
    from safetensors import safe_open

    sizes = {"F32": 4, "F16": 2, "I8": 1, "BF16": 2}
    params = data = 0
    shards = sorted(sharded.glob("*.safetensors"))
    for shard in shards:
        with safe_open(str(shard), framework="numpy") as handle:
            for name in handle.keys():  # noqa: SIM118 - a handle, not a dict
                piece = handle.get_slice(name)
                params += math.prod(piece.get_shape())
                data += math.prod(piece.get_shape()) * sizes[piece.get_dtype()]
    model = read_model([str(sharded)])
    assert len(model.files) == 3 and model.index_missing == []
    assert model.parameters == params == 64 * 16 + 16 + 256 + 64 + 256 + 192
    assert model.tensor_bytes == data
    assert model.file_bytes == sum(p.stat().st_size for p in shards)
    assert model.dtypes == {"fp32": 4096, "fp16": 32 + 128, "int8": 256, "bf16": 896}
    assert model.config is not None and model.config.kv_heads == 8
    (sharded / "model.safetensors.index.json").unlink()  # without the index: the files
    assert read_model([str(sharded)]).file_bytes == model.file_bytes
    assert any("PyTorch" in n for n in read_model([str(sharded)]).notes)


def test_a_missing_shard_is_said(sharded: Path) -> None:
    (sharded / "model-00002-of-00003.safetensors").unlink()
    model = read_model([str(sharded)])
    assert model.index_missing == ["model-00002-of-00003.safetensors"]
    assert any("missing" in n for n in model.notes)


def test_a_gguf_file_is_read(tmp_path: Path) -> None:
    gguf = pytest.importorskip("gguf")
    path = tmp_path / "tiny.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(2)
    writer.add_tensor("token_embd.weight", np.zeros((32, 8), np.float32))
    writer.add_tensor("output_norm.weight", np.ones(8, np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    model = read_model([str(path)])
    (only,) = model.files
    assert only.format == "gguf" and only.parameters == 32 * 8 + 8
    assert only.tensor_bytes == 32 * 8 * 4 + 8 * 2 and only.dtypes == {"fp32": 1024, "fp16": 16}
    assert only.file_bytes == path.stat().st_size


def test_truncated_and_oversized_headers_are_refused(tmp_path: Path) -> None:
    short = tmp_path / "short.safetensors"
    short.write_bytes(b"\x10\0\0")
    huge = tmp_path / "huge.safetensors"
    huge.write_bytes(struct.pack("<Q", 1 << 40) + b"{}")
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(struct.pack("<Q", 64) + b'{"a": {"dtype": "F32"')
    notjson = tmp_path / "bad.safetensors"
    notjson.write_bytes(struct.pack("<Q", 4) + b"\xff\xfe{{")
    for path, words in ((short, "shorter"), (huge, "declares"), (cut, "declares"),
                        (notjson, "not JSON")):
        with pytest.raises(InputError, match=words):
            read_safetensors_header(str(path))
        code, _, err = _run(["weights", str(path)])
        assert code == EXIT_INPUT and "Traceback" not in err and path.name in err


def test_a_directory_without_a_model_is_an_input_error(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("hello")
    code, out, err = _run(["weights", str(tmp_path)])
    assert code == EXIT_INPUT and "no model here" in err and out == ""


# --- the bounded read ---------------------------------------------------------------------
def _io_counter(field: str) -> int | None:
    try:
        text = Path("/proc/self/io").read_text()
    except OSError:
        return None
    return int(next(ln.split()[1] for ln in text.splitlines() if ln.startswith(field)))


def test_measure_reads_at_most_the_bytes_it_is_told(tmp_path: Path) -> None:
    path = tmp_path / "weights.bin"
    path.write_bytes(os.urandom(3 * 1024 * 1024 + 100))
    before_stat = path.stat()
    before = _io_counter("rchar:")
    found = measure_read(str(path), 1_000_000, chunk=256 * 1024)
    after = _io_counter("rchar:")
    assert 0 < found.bytes_read <= 1_000_000 and found.seconds > 0
    if found.direct:
        assert found.bytes_read % 4096 == 0
    if before is not None and after is not None:  # the kernel's own count of bytes read
        assert after - before <= 1_000_000 + 64 * 1024
    whole = measure_read(str(path), 10**9)
    assert whole.bytes_read <= path.stat().st_size and "whole file" in whole.note
    assert path.stat().st_mtime_ns == before_stat.st_mtime_ns  # never written


# --- the command ----------------------------------------------------------------------------
def test_the_classic_herd_on_the_command_line() -> None:
    code, out, err = _run(["weights", "--params", "70B", "--dtype", "fp16", "--replicas", "50",
                           "--link", "100Gb/s", "--gpu", "H100 SXM"])
    assert code == 1, err  # a 9-minute herd is a warning (issue 32)
    assert "weights 140.0 GB (fp16)" in out and "7.00 TB in all" in out
    assert "every replica pulls at once" in out and "9 min 20 s" in out
    assert "pre-pull DaemonSet" in out and "node-local cache" in out
    assert "H100 SXM" in out and "TP 2" in out and "A100" not in out


def test_on_an_80_column_terminal_no_word_is_broken() -> None:
    """The tables wrap between words on a terminal; piped they are whole lines."""
    from rich.console import Console

    from gputriage.views.weightsview import print_weights

    code, out, _ = _run(["weights", "--params", "70B", "--dtype", "fp16", "--replicas", "50",
                         "--link", "100Gb/s", "--json"])
    doc = json.loads(out)
    code, piped, _ = _run(["weights", "--params", "70B", "--dtype", "fp16", "--replicas", "50",
                           "--link", "100Gb/s"])
    buf = io.StringIO()
    print_weights(Console(file=buf, width=80, force_terminal=True, color_system=None), doc)
    lines = buf.getvalue().splitlines()
    assert max(len(ln) for ln in lines) <= 80
    assert set(piped.split()) <= set(buf.getvalue().split())
    assert max(len(ln) for ln in piped.splitlines()) > 80  # piped: nothing wrapped


def test_json_of_a_model_directory_validates(sharded: Path) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    from gputriage import schemas

    code, out, err = _run(["weights", str(sharded), "--context", "8192", "--batch", "4",
                           "--bandwidth", "nfs=2GB/s", "--replicas", "4", "--link", "25Gb/s",
                           "--json"])
    assert code == 0, err
    doc = json.loads(out)
    jsonschema.Draft202012Validator(schemas.bundled("weights")).validate(doc)
    assert doc["model"]["parameters_from"] == "headers"
    assert doc["memory"]["kv_bytes_per_token"] == 131_072
    assert doc["memory"]["kv_cache_bytes"] == 131_072 * 8192 * 4
    assert doc["load"]["tiers"]["nfs"] == {"bytes_per_s": 2e9, "origin": "stated",
                                           "seconds": doc["load"]["bytes"] / 2e9}
    assert doc["herd"]["total_bytes"] == 4 * doc["model"]["file_bytes"]


def test_measure_and_model_dir_on_the_command_line(sharded: Path) -> None:
    code, out, err = _run(["weights", "--params", "8B", "--measure", str(sharded),
                           "--measure-bytes", "64kB", "--measure-tier", "local_nvme",
                           "--model-dir", str(sharded), "--json"])
    assert code in (0, 1), err
    doc = json.loads(out)
    assert doc["measure"]["bytes_read"] <= 64_000
    # 64 kB time the first requests, not the disk: reported, not used
    assert doc["load"]["tiers"]["local_nvme"]["origin"] == "assumed"
    assert "not used for local NVMe" in doc["measure"]["note"]
    assert doc["host"]["model_dir"] == str(sharded.resolve())
    code, out, _ = _run(["weights", "--model-dir", str(sharded), "--host-report"])
    assert code == 0 and out.startswith("== gputriage weights: host check ==")


def test_the_html_report_holds_the_figures(sharded: Path, tmp_path: Path) -> None:
    """--html writes one self-contained page with the same figures as the JSON; the
    terminal output is unchanged."""
    page = tmp_path / "weights.html"
    argv = ["weights", str(sharded), "--replicas", "50", "--link", "100Gb/s",
            "--model-dir", str(sharded)]
    code, plain_out, _ = _run(argv)
    code_html, out, err = _run([*argv, "--html", str(page)])
    assert (code_html, out) == (code, plain_out)
    assert f"HTML report written to {page}" in err
    text = page.read_text()
    assert "Content-Security-Policy" in text and "default-src &#x27;none&#x27;" in text
    assert "<script" not in text and " src=" not in text and " href=" not in text
    for heading in ("Model and GPU memory", "Fit", "Load time per tier", "The herd",
                    "This host"):
        assert f">{heading}</h2>" in text, heading
    assert "every replica pulls at once" in text and "pre-pull DaemonSet" in text
    assert str(sharded.resolve()) in text


@pytest.mark.parametrize("argv", [
    ["--params", "seventy"], ["--params", "70B", "--link", "100"],
    ["--params", "70B", "--bandwidth", "nfs=fast"], ["--params", "70B", "--bandwidth", "x=1GB/s"],
    ["--params", "70B", "--dtype", "fp7"], ["--params", "70B", "--replicas", "5"],
    ["--params", "70B", "--gpu", "Voodoo2"], [], ["--params", "70B", "--host-report"],
])
def test_bad_options_are_usage_errors(argv: list[str]) -> None:
    code, out, err = _run(["weights", *argv])
    assert code == EXIT_USAGE and err.startswith("gputriage: usage error") and out == ""


# --- review findings: hostile files, bounds, the views ------------------------------------
def _gguf_kv(key: bytes, kind: int, value: bytes) -> bytes:
    return struct.pack("<Q", len(key)) + key + struct.pack("<I", kind) + value


def _gguf_bytes(tensors: int = 0, kvs: bytes = b"", n_kv: int = 0, version: int = 3,
                tail: bytes = b"") -> bytes:
    return b"GGUF" + struct.pack("<IQQ", version, tensors, n_kv) + kvs + tail


def _tensor_info(name: bytes, dims: list[int], kind: int, offset: int = 0) -> bytes:
    return (struct.pack("<Q", len(name)) + name + struct.pack("<I", len(dims))
            + struct.pack(f"<{len(dims)}Q", *dims) + struct.pack("<IQ", kind, offset))


HOSTILE_GGUF = {
    # a uint8 array of 2^60 elements: the package's reader allocated for minutes
    "array": (_gguf_bytes(kvs=_gguf_kv(b"a", 9, struct.pack("<IQ", 0, 1 << 60)), n_kv=1),
              "array length"),
    "string": (_gguf_bytes(kvs=_gguf_kv(b"a", 8, struct.pack("<Q", 1 << 62)), n_kv=1),
               "string length"),
    "key": (b"GGUF" + struct.pack("<IQQQ", 3, 0, 1, 1 << 40) + bytes(16), "a key length"),
    "kv count": (_gguf_bytes(n_kv=1 << 62), "key-value count"),
    "tensors": (_gguf_bytes(tensors=1 << 62), "tensor count"),
    "value type": (_gguf_bytes(kvs=_gguf_kv(b"a", 13, b"\0" * 8), n_kv=1), "value type 13"),
    "array type": (_gguf_bytes(kvs=_gguf_kv(b"a", 9, struct.pack("<IQ", 77, 1)), n_kv=1),
                   "element type 77"),
    "dims": (_gguf_bytes(tensors=1, tail=_tensor_info(b"t", [1] * 9, 0)), "9 dimensions"),
    "ggml type": (_gguf_bytes(tensors=1, tail=_tensor_info(b"t", [4], 99)), "type 99"),
    "block": (_gguf_bytes(tensors=1, tail=_tensor_info(b"t", [33], 2)), "blocks"),
    "past end": (_gguf_bytes(tensors=1, tail=_tensor_info(b"t", [1 << 40, 1 << 20], 0)),
                 "past the end"),
    "version 1": (_gguf_bytes(version=1), "version 1"),
    "magic": (b"GGML" + bytes(20), "magic"),
    "short": (b"GGUF\3\0", "past the end"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_GGUF))
def test_a_hostile_gguf_header_is_refused_at_once(tmp_path: Path, case: str) -> None:
    import resource
    import time

    raw, words = HOSTILE_GGUF[case]
    path = tmp_path / "hostile.gguf"
    path.write_bytes(raw)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    with pytest.raises(InputError, match=words):
        read_model([str(path)])
    assert time.perf_counter() - start < 2
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100_000  # kB
    code, out, err = _run(["weights", str(path)])
    assert code == EXIT_INPUT and out == "" and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and "not a readable GGUF file" in err


def _write_gguf(path: Path, tensors: dict[str, Any], big: bool = False,
                align: int | None = None) -> None:
    """A GGUF file by the official package: (array, raw ggml type or None) per name."""
    gguf = pytest.importorskip("gguf")
    endian = gguf.GGUFEndian.BIG if big else gguf.GGUFEndian.LITTLE
    writer = gguf.GGUFWriter(str(path), "llama", endianess=endian)
    writer.add_block_count(2)
    if align is not None:
        writer.add_custom_alignment(align)
    writer.add_token_list([f"tok{i}" for i in range(300)])
    for name, (array, raw) in tensors.items():
        writer.add_tensor(name, array, raw_dtype=raw)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.mark.parametrize(("big", "align"), [(False, None), (True, None), (False, 64)])
def test_gguf_sizes_match_the_gguf_package(tmp_path: Path, big: bool, align: int | None
                                           ) -> None:
    """Our bounded walk against the package's reader: every quantisation's bytes."""
    gguf = pytest.importorskip("gguf")
    from gputriage.weights.ggufheader import GGML_TYPES

    q = gguf.GGMLQuantizationType
    kinds = [q.Q4_0, q.Q4_1, q.Q5_0, q.Q5_1, q.Q8_0, q.Q2_K, q.Q3_K, q.Q4_K, q.Q5_K, q.Q6_K,
             q.IQ2_XXS, q.IQ3_S, q.IQ4_NL, q.IQ4_XS, q.IQ1_M, q.TQ2_0, q.MXFP4]
    tensors: dict[str, Any] = {
        "f32": (np.zeros((4, 8), np.float32), None), "f16": (np.zeros(8, np.float16), None),
        "i32": (np.zeros(3, np.int32), None)}
    for kind in kinds:
        block, size = gguf.GGML_QUANT_SIZES[kind]
        tensors[kind.name] = (np.zeros((2, 512 // block * size), np.uint8), kind)
    path = tmp_path / "quants.gguf"
    _write_gguf(path, tensors, big=big, align=align)
    reader = gguf.GGUFReader(str(path), "r")
    (only,) = read_model([str(path)]).files
    assert only.tensors == len(reader.tensors) == len(tensors)
    assert only.parameters == sum(int(t.n_elements) for t in reader.tensors)
    assert only.tensor_bytes == sum(int(t.n_bytes) for t in reader.tensors)
    assert only.dtypes["q4_k"] == 2 * 2 * 144 and only.dtypes["fp32"] == 128
    for kind in q:  # the table against the package's (Q8_1: see GGML_TYPES)
        if kind.value in GGML_TYPES and kind != q.Q8_1:
            assert GGML_TYPES[kind.value] == (kind.name, *gguf.GGML_QUANT_SIZES[kind]), kind


def _raw_safetensors(path: Path, header: dict[str, Any], data: int) -> None:
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(data))


def _entry(dtype: Any = "F32", shape: Any = (2, 3), offsets: Any = (0, 24)) -> dict[str, Any]:
    return {"dtype": dtype, "shape": list(shape) if isinstance(shape, tuple) else shape,
            "data_offsets": list(offsets) if isinstance(offsets, tuple) else offsets}


HOSTILE_ST = {
    "shape of strings": ({"t": _entry(shape=["x"])}, "shape"),
    "shape a number": ({"t": _entry(shape=5)}, "shape"),
    "negative": ({"t": _entry(shape=[-5, 3])}, "shape"),
    "floats": ({"t": _entry(shape=[1e30, 1e30])}, "shape"),
    "booleans": ({"t": _entry(shape=[True, 24])}, "shape"),
    "huge": ({"t": _entry(shape=[1 << 40, 1 << 40])}, "elements"),
    "dtype": ({"t": _entry(dtype="F7")}, "unknown dtype"),
    "no dtype": ({"t": {"shape": [1], "data_offsets": [0, 4]}}, "unknown dtype"),
    "span": ({"t": _entry(offsets=(0, 20))}, "span"),
    "past data": ({"t": _entry(offsets=(24, 48))}, "data_offsets"),
    "offsets": ({"t": _entry(offsets="0-24")}, "data_offsets"),
    "overlap": ({"a": _entry(), "b": _entry(shape=(1,), offsets=(20, 24))}, "overlap"),
    "entry": ({"t": [1, 2]}, "not an object"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_ST))
def test_a_hostile_safetensors_header_is_refused(tmp_path: Path, case: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Checked by us, not by the package (absent here, as on a host without numpy)."""
    import sys

    monkeypatch.setitem(sys.modules, "safetensors", None)
    header, words = HOSTILE_ST[case]
    path = tmp_path / "hostile.safetensors"
    _raw_safetensors(path, header, 24)
    with pytest.raises(InputError, match=words):
        read_model([str(path)])
    code, out, err = _run(["weights", str(path)])
    assert code == EXIT_INPUT and out == "" and "Traceback" not in err


def test_safetensors_sizes_match_the_package_without_it(sharded: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The product reads the header itself: the same figures with the package gone, and
    the dtypes it does not name in numpy (F8_E8M0, U16) sized."""
    import sys

    expected = read_model([str(sharded)])
    monkeypatch.setitem(sys.modules, "safetensors", None)
    again = read_model([str(sharded)])
    assert (again.parameters, again.tensor_bytes, again.dtypes) == (
        expected.parameters, expected.tensor_bytes, expected.dtypes)
    path = sharded / "extra" / "odd.safetensors"
    path.parent.mkdir()
    _raw_safetensors(path, {"s": _entry("F8_E8M0", (8,), (0, 8)),
                            "u": _entry("U16", (4,), (8, 16)),
                            "f": _entry("F4", (6,), (16, 19))}, 19)
    (odd,) = read_model([str(path)]).files
    assert odd.parameters == 18 and odd.dtypes == {"f8_e8m0": 8, "int16": 8, "fp4": 3}


@pytest.mark.parametrize("size", [0, 100])
def test_a_tiny_or_empty_measure_is_reported_not_used(tmp_path: Path, size: int) -> None:
    path = tmp_path / "weights.bin"
    path.write_bytes(os.urandom(size))
    code, out, err = _run(["weights", "--params", "8B", "--measure", str(path),
                           "--measure-tier", "nfs", "--json"])
    assert code == 0, err
    doc = json.loads(out)
    assert doc["load"]["tiers"]["nfs"]["origin"] == "assumed"
    assert "not used for network file system" in doc["measure"]["note"]
    code, out, _ = _run(["weights", "--params", "8B", "--measure", str(path),
                         "--measure-tier", "nfs"])
    assert code == 0 and "not used for network file system" in out
    html = tmp_path / "w.html"
    _run(["weights", "--params", "8B", "--measure", str(path), "--html", str(html)])
    assert "not used for" in html.read_text()


def test_a_measure_of_64_mib_is_used(tmp_path: Path) -> None:
    path = tmp_path / "weights.bin"
    with open(path, "wb") as fh:
        fh.truncate(65 * 1024 * 1024)  # sparse: quick to read
    code, out, err = _run(["weights", "--params", "8B", "--measure", str(path),
                           "--measure-bytes", "64MiB", "--measure-tier", "nfs", "--json"])
    assert code == 0, err
    doc = json.loads(out)
    assert doc["measure"]["bytes_read"] == 64 * 1024 * 1024
    assert doc["load"]["tiers"]["nfs"]["origin"] == "measured"


def test_absurd_numbers_are_value_errors() -> None:
    for bad in ("1e400", "inf", "-inf", "nan", "9" * 400, "1e16"):
        with pytest.raises(ValueError):
            parse_params(bad)
    for bad in ("9" * 400, "1e400", "2000PB"):
        with pytest.raises(ValueError):
            parse_size(bad)
    with pytest.raises(ValueError):
        parse_rate("9" * 400 + "GB/s")


@pytest.mark.parametrize("argv", [
    ["--params", "1e400"], ["--params", "inf"], ["--params", "nan"],
    ["--params", "8B", "--measure", ".", "--measure-bytes", "9" * 400],
    ["--params", "8B", "--measure", ".", "--measure-bytes", "100"],
    ["--params", "8B", "--link", "9" * 400 + "Gb/s", "--replicas", "2"],
])
def test_absurd_options_are_usage_errors(argv: list[str]) -> None:
    code, out, err = _run(["weights", *argv])
    assert code == EXIT_USAGE and out == "" and "Traceback" not in err, err


def test_a_config_with_an_absurd_dimension(tmp_path: Path) -> None:
    text = json.dumps(LLAMA3_8B).replace('"num_hidden_layers": 32',
                                         '"num_hidden_layers": 1' + "0" * 400)
    (tmp_path / "config.json").write_text(text)
    code, out, err = _run(["weights", str(tmp_path)])
    assert code == EXIT_INPUT and "num_hidden_layers" in err and "Traceback" not in err
    (tmp_path / "model.bin").write_bytes(bytes(1000))  # with weights: a note, the size
    code, out, err = _run(["weights", str(tmp_path), "--json"])
    assert code == 0, err
    doc = json.loads(out)
    assert doc["model"]["config"] is None and doc["model"]["file_bytes"] == 1000
    assert any("num_hidden_layers" in n for n in doc["model"]["notes"])
    huge_context = {**LLAMA3_8B, "max_position_embeddings": 10**30}
    assert parse_config(huge_context).max_context is None


@pytest.mark.parametrize("content", ["empty", "bad config", "bad weights"])
def test_host_report_of_a_directory_not_staged_yet(tmp_path: Path, content: str) -> None:
    """check --model-dir needs the host's report even before the model is there."""
    from gputriage.parsers.weights_host import parse_weights_host

    if content == "bad config":
        (tmp_path / "config.json").write_text("{not json")
    elif content == "bad weights":
        (tmp_path / "model.safetensors").write_bytes(b"\1\0\0\0\0\0\0\0{" + bytes(99))
    code, out, err = _run(["weights", "--model-dir", str(tmp_path), "--host-report"])
    assert code == 0, err
    host = parse_weights_host(out)
    assert host.model_dir == str(tmp_path.resolve())
    assert host.model_bytes == (108 if content == "bad weights" else None)
    code, _, err = _run(["weights", str(tmp_path), "--model-dir", str(tmp_path),
                         "--host-report"])
    assert code == EXIT_INPUT  # a model named to size is still read


def test_index_names_outside_its_directory_are_ignored(sharded: Path, tmp_path: Path) -> None:
    outside = tmp_path.parent / f"{tmp_path.name}-outside.safetensors"
    outside.write_bytes((sharded / "model-00001-of-00003.safetensors").read_bytes())
    index_path = sharded / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    index["weight_map"].update({"x": f"../{outside.name}", "y": str(outside),
                                "z": "/etc/passwd", "w": 7})
    index_path.write_text(json.dumps(index))
    try:
        model = read_model([str(sharded)])
    finally:
        outside.unlink()
    assert len(model.files) == 3
    assert all(Path(f.path).parent == sharded for f in model.files)
    assert any("ignored" in n and "/etc/passwd" in n for n in model.notes)


def test_an_index_whose_shards_are_all_missing_says_so(tmp_path: Path) -> None:
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors",
                            "b": "model-00002-of-00002.safetensors"}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    code, _, err = _run(["weights", str(tmp_path)])
    assert code == EXIT_INPUT and "missing" in err and "no model here" not in err


def test_several_gguf_files_must_be_one_split_model(tmp_path: Path) -> None:
    tensor = {"w": (np.zeros((4, 8), np.float32), None)}
    for name in ("m-Q4_K_M.gguf", "m-Q8_0.gguf"):
        _write_gguf(tmp_path / name, tensor)
    code, _, err = _run(["weights", str(tmp_path)])
    assert code == EXIT_INPUT and "m-Q4_K_M.gguf" in err and "m-Q8_0.gguf" in err
    assert len(read_model([str(tmp_path / "m-Q8_0.gguf")]).files) == 1  # one named: fine
    split = tmp_path / "split"
    split.mkdir()
    for part in (1, 2):
        _write_gguf(split / f"m-0000{part}-of-00002.gguf", tensor)
    assert len(read_model([str(split)]).files) == 2
    (split / "m-00002-of-00002.gguf").unlink()
    assert any("1 of the 2 parts" in n for n in read_model([str(split)]).notes)


def test_kv_cache_per_gpu_stops_splitting_at_the_kv_heads() -> None:
    need = plan.Need(weights=0.0, kv_cache=64e9, overhead=0.0)
    assert plan.per_gpu(need, 4, kv_heads=8) == 16e9
    assert plan.per_gpu(need, 16, kv_heads=8) == 8e9  # each GPU holds one KV head: kv/8
    assert plan.per_gpu(need, 16) == 4e9
    sku = plan.GpuSku("X", "x", 10.0, 8)  # 10 GB each
    (fit,) = plan.fits(plan.Need(0.0, 88e9, 0.0), (sku,), heads=64, kv_heads=8)
    assert fit.tp is None  # 88/8 = 11 GB at TP 8 and above (kv/tp said 5.5 at TP 16)
    (fit,) = plan.fits(plan.Need(0.0, 88e9, 0.0), (sku,), heads=64, kv_heads=16)
    assert fit.tp == 16 and fit.per_gpu == 5.5e9
    assert not hasattr(plan.Fit, "one_node")


def test_a_degree_ruled_out_by_the_heads_is_said(tmp_path: Path) -> None:
    from gputriage.weights.text import fit_verdict

    config = {**LLAMA3_8B, "num_attention_heads": 40, "num_key_value_heads": 8,
              "hidden_size": 5120}
    (tmp_path / "config.json").write_text(json.dumps(config))
    code, out, err = _run(["weights", "--params", "400B", "--dtype", "fp16", "--config",
                           str(tmp_path / "config.json"), "--gpu", "H100 SXM"])
    assert code == 0, err
    assert "does not fit at TP 8 (TP 16 and above do not divide its 40 attention heads)" \
        in out
    row = {"tp": None, "per_gpu_bytes": None, "nodes": None, "node_gpus": 8}
    assert fit_verdict(row, None) == (f"does not fit at TP {plan.TP_DEGREES[-1]}", True)


def test_gpu_names_match_exactly_first() -> None:
    code, out, err = _run(["weights", "--params", "8B", "--gpu", "L4", "--json"])
    assert code == 0, err
    assert [f["sku"] for f in json.loads(out)["fit"]] == ["L4"]
    code, out, _ = _run(["weights", "--params", "8B", "--gpu", "h100", "--json"])
    assert {f["sku"] for f in json.loads(out)["fit"]} == {"H100 PCIe", "H100 SXM", "H100 NVL"}


def test_bin_only_and_config_only_directories_read_plainly(tmp_path: Path) -> None:
    (tmp_path / "pytorch_model.bin").write_bytes(bytes(4096))
    code, out, err = _run(["weights", str(tmp_path)])
    assert code == 0, err
    assert "(as stored)" in out and "as stored (as stored)" not in out
    (tmp_path / "pytorch_model.bin").unlink()
    (tmp_path / "config.json").write_text(json.dumps(LLAMA3_8B))
    code, out, err = _run(["weights", str(tmp_path)])
    assert code == 0, err
    assert "on disk" not in out and "0 file(s)" not in out
    code, out, _ = _run(["weights", str(tmp_path), "--json"])
    assert json.loads(out)["model"]["file_bytes"] is None


def test_the_html_host_report_keeps_its_lines(sharded: Path, tmp_path: Path) -> None:
    import re

    page = tmp_path / "w.html"
    _run(["weights", str(sharded), "--model-dir", str(sharded), "--html", str(page)])
    text = page.read_text()
    pre = re.search(r"<pre>(.*?)</pre>", text, re.S)
    assert pre is not None and "\\x0a" not in pre.group(1)
    assert pre.group(1).splitlines()[0] == "== gputriage weights: host check =="
    assert any(ln.startswith("model_dir: ") for ln in pre.group(1).splitlines())


def test_the_two_views_share_their_sentences() -> None:
    from gputriage.views import weightsview
    from gputriage.views.html import weights as html_view

    for module in (html_view, weightsview):
        assert not hasattr(module, "_rate") and not hasattr(module, "_measured")


def test_pick_file_walks_a_bounded_number_of_entries(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from gputriage.weights import measure

    for i in range(30):
        (tmp_path / f"f{i:02d}").write_bytes(bytes(i))
    assert measure.pick_file(str(tmp_path)) == str(tmp_path / "f29")
    monkeypatch.setattr(measure, "MAX_ENTRIES", 5)
    deep = tmp_path / "deep"
    for _ in range(3):
        deep = deep / "d"
    deep.mkdir(parents=True)
    (deep / "big").write_bytes(bytes(100))
    assert measure.pick_file(str(tmp_path)) != str(deep / "big")  # stopped before it


MOUNTS = """\
22 1 253:0 / / rw,relatime shared:1 - ext4 /dev/mapper/vg-root rw
23 1 253:1 / /data rw,relatime shared:2 - xfs /dev/dm-3 rw
24 1 8:17 / /mnt/win rw,relatime shared:3 - fuseblk /dev/sdb1 rw,user_id=0
25 1 0:50 / {model} rw,relatime shared:4 - nfs4 nas:/export rw
"""


def test_device_mapper_and_fuseblk_are_local_disks(tmp_path: Path) -> None:
    from gputriage.parsers.weights_host import classify_mount, parse_mountinfo
    from gputriage.weights.host import host_report

    mounts = parse_mountinfo(MOUNTS.format(model=tmp_path.resolve()))
    assert [classify_mount(m) for m in mounts] == ["local_disk"] * 3 + ["nfs"]
    text = host_report(str(tmp_path), 10**9, mountinfo=MOUNTS.format(model=tmp_path.resolve()),
                       meminfo="MemAvailable: 1 kB\n")
    from gputriage.parsers.weights_host import parse_weights_host

    host = parse_weights_host(text)  # no NVMe: the roomiest local disk is the candidate
    assert host.local_mount is not None and host.local_tier == "local_disk"
