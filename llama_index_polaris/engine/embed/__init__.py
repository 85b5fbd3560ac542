"""Embedding on the CPU: model registry, model files (cache, bundle, download), ONNX embedder.

    spec = get_model_spec("all-minilm-l6-v2")
    embedder = load_embedder(spec.id)            # same object for the same arguments
    vectors = embedder.embed_documents(texts)     # float32 (n, dim), unit length, doc prefix
    query = embedder.embed_query("how do we ...") # float32 (dim,), query prefix

Modules: ``registry`` (ModelSpec, built-ins, plugin lookup), ``cache`` (where files come
from), ``download`` (resumable, verified fetch), ``fingerprint`` (memoised sha256),
``runtime`` (ONNX session, tokenizer, batching), ``pooling`` (pure vector maths),
``embedder`` (Embedder, load_embedder). Heavy imports (onnxruntime, tokenizers,
huggingface_hub, tqdm) happen on first use, not here.
"""

from .cache import ModelFiles, model_cache_dir, model_status, resolve
from .embedder import Embedder, clear_embedders, embedder_from_config, load_embedder, resolve_dim
from .registry import BUILTIN_MODELS, BundledModel, ModelFile, ModelSpec, get_model_spec, list_models

__all__ = [
    "BUILTIN_MODELS",
    "BundledModel",
    "Embedder",
    "ModelFile",
    "ModelFiles",
    "ModelSpec",
    "clear_embedders",
    "embedder_from_config",
    "get_model_spec",
    "list_models",
    "load_embedder",
    "model_cache_dir",
    "model_status",
    "resolve",
    "resolve_dim",
]
