"""Pure numpy maths from a model's hidden states to stored vectors: pool, layer-norm, truncate, normalise."""

from __future__ import annotations

import numpy as np

LAYER_NORM_EPS = 1e-5  # torch.nn.functional.layer_norm's default, as in nomic's recipe


def mean_pool(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Average of the token states where ``mask`` is 1: (batch, tokens, dim) -> (batch, dim)."""
    weights = mask[..., None].astype(hidden.dtype)
    counts = np.maximum(weights.sum(axis=1), 1e-9)
    return (hidden * weights).sum(axis=1) / counts


def cls_pool(hidden: np.ndarray) -> np.ndarray:
    """The first token's state: (batch, tokens, dim) -> (batch, dim)."""
    return hidden[:, 0]


def layer_norm(x: np.ndarray, eps: float = LAYER_NORM_EPS) -> np.ndarray:
    """Layer normalisation over the last axis without affine parameters."""
    mean = x.mean(axis=-1, keepdims=True)
    var = x.var(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps)


def l2_normalize(x: np.ndarray) -> np.ndarray:
    """Scale each row to unit length (an all-zero row stays zero)."""
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    return x / np.maximum(norms, 1e-12)


def finish(hidden: np.ndarray, mask: np.ndarray, *, pooling: str, use_layer_norm: bool, dim: int) -> np.ndarray:
    """Pool, optionally layer-norm over the full width, keep the first ``dim`` values, L2-normalise."""
    pooled = mean_pool(hidden, mask) if pooling == "mean" else cls_pool(hidden)
    if use_layer_norm:
        pooled = layer_norm(pooled)
    return l2_normalize(pooled[:, :dim]).astype(np.float32, copy=False)
