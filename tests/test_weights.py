"""gputriage weights: sizes from real safetensors / GGUF files, the arithmetic against
hand-computed cases (public config.json numbers), the bounded read, the command."""

from __future__ import annotations

import io
import json
import math
import os
import struct
from pathlib import Path

import pytest

from gputriage.cli import EXIT_INPUT, EXIT_USAGE, Environment, main
from gputriage.errors import InputError
from gputriage.weights import plan
from gputriage.weights.arch import kv_bytes_per_token, parse_config
from gputriage.weights.files import read_model, read_safetensors_header
from gputriage.weights.measure import measure_read
from gputriage.weights.units import dtype_bytes, parse_params, parse_rate, parse_size

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
    assert code == 0, err
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
    assert doc["load"]["tiers"]["local_nvme"]["origin"] == "measured"
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
