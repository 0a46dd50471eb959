"""What ``config.json`` says of a model: its shape, its parameter count, and the bytes
its KV cache takes per token.

The count is the decoder-only transformer's (Llama, Mistral, Qwen, ...): embeddings,
per layer the attention projections (grouped-query: K and V have ``kv_heads`` heads)
and a gated MLP (three matrices), the norms, and an LM head unless tied. A mixture of
experts multiplies the MLP by its experts. Exact for those families; an estimate for
others, and said so: the files' own headers, when at hand, are the count that holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gputriage.text.units import normalise_dtype

__all__ = ["ModelConfig", "kv_bytes_per_token", "parse_config"]


@dataclass(frozen=True)
class ModelConfig:
    """The numbers of a ``config.json`` that size a model."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    intermediate: int | None = None
    experts: int = 1
    tied_embeddings: bool = False
    dtype: str | None = None  # torch_dtype, normalised (bf16, fp16...)
    max_context: int | None = None
    model_type: str | None = None

    def parameters(self) -> int:
        """The parameter count of a decoder-only transformer of this shape."""
        h, q = self.hidden, self.heads * self.head_dim
        kv = self.kv_heads * self.head_dim
        attention = h * q + 2 * h * kv + q * h
        mlp = 3 * h * self.intermediate * self.experts if self.intermediate else 8 * h * h
        router = h * self.experts if self.experts > 1 else 0
        per_layer = attention + mlp + router + 2 * h  # two RMSNorm weights
        embeddings = self.vocab * h
        head = 0 if self.tied_embeddings else self.vocab * h
        return self.layers * per_layer + embeddings + head + h  # + the final norm


def kv_bytes_per_token(config: ModelConfig, kv_dtype_bytes: float) -> float:
    """K and V, every layer, every KV head: 2 × layers × kv_heads × head_dim × bytes."""
    return 2 * config.layers * config.kv_heads * config.head_dim * kv_dtype_bytes


# no model's dimension is larger: beyond it a value is an error (or a hostile file),
# and the arithmetic would leave floating point
MAX_DIMENSION = 10**9


def _int(doc: dict[str, Any], *keys: str, bounded: bool = True) -> int | None:
    """The first positive integer of ``keys``; ValueError past :data:`MAX_DIMENSION`
    (``bounded=False``: such a value is taken as absent)."""
    for key in keys:
        value = doc.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            if value <= MAX_DIMENSION:
                return value
            if bounded:
                raise ValueError(f"config.json {key} is over {MAX_DIMENSION:,}: "
                                 "not a model's")
    return None


def parse_config(doc: Any) -> ModelConfig:
    """A ``config.json`` document (a multimodal one's ``text_config`` when it has one);
    ValueError naming what is missing."""
    if not isinstance(doc, dict):
        raise ValueError("config.json is not a JSON object")
    text = doc.get("text_config")
    inner = text if isinstance(text, dict) else doc
    layers = _int(inner, "num_hidden_layers", "n_layer", "num_layers")
    hidden = _int(inner, "hidden_size", "n_embd", "d_model")
    heads = _int(inner, "num_attention_heads", "n_head")
    vocab = _int(inner, "vocab_size") or _int(doc, "vocab_size")
    missing = [name for name, value in (("num_hidden_layers", layers), ("hidden_size", hidden),
                                        ("num_attention_heads", heads), ("vocab_size", vocab))
               if value is None]
    if missing:
        raise ValueError(f"config.json lacks {', '.join(missing)}")
    assert layers and hidden and heads and vocab
    kv_heads = _int(inner, "num_key_value_heads", "n_head_kv") or heads
    head_dim = _int(inner, "head_dim") or hidden // heads
    raw_dtype = inner.get("torch_dtype") or doc.get("torch_dtype") or inner.get("dtype")
    return ModelConfig(
        layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
        vocab=vocab, intermediate=_int(inner, "intermediate_size", "n_inner", "ffn_dim"),
        experts=_int(inner, "num_local_experts", "num_experts") or 1,
        tied_embeddings=bool(inner.get("tie_word_embeddings", doc.get("tie_word_embeddings",
                                                                      False))),
        dtype=normalise_dtype(raw_dtype) if isinstance(raw_dtype, str) else None,
        max_context=_int(inner, "max_position_embeddings", "n_positions", bounded=False),
        model_type=str(doc.get("model_type")) if doc.get("model_type") else None)
