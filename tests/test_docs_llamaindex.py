"""Every Python snippet of docs/llamaindex.md runs, in order, as a reader would paste it:
in a fresh process, in a folder holding the handbook, with no polaris.toml and no network."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent
DOC = ROOT / "docs" / "llamaindex.md"


def snippets() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```$", DOC.read_text(), flags=re.S | re.M)


def test_every_snippet_of_the_page_runs(tmp_path):
    shutil.copytree(ROOT / "examples" / "handbook", tmp_path / "handbook")
    code = "\n".join(f"print('--- snippet {i}')\n{text}" for i, text in enumerate(snippets()))
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / ".xdg"), "HF_HUB_OFFLINE": "1"}
    env.pop("IS_TESTING", None)  # LlamaIndex would hand out mock models: the page must not need them
    run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]
    out = run.stdout
    assert len(snippets()) >= 6 and f"--- snippet {len(snippets()) - 1}" in out
    reopened = out.split("--- snippet 1\n")[1].splitlines()[0]
    assert re.fullmatch(r"[a-z-]+/[a-z-]+\.md [^>]+ > .+", reopened)  # a hit with its path and heading path
    stored, again = re.findall(r"^(\d+) nodes", out, flags=re.M)
    assert int(stored) > 50 and again == "0"
    filtered = re.findall(r"^(auth/\S+) (\d)$", out, flags=re.M)
    assert filtered and all(int(level) >= 2 for _, level in filtered)
    assert "OpenAI" not in run.stderr


def test_as_index_names_another_librarys_model(tmp_path):
    """A file embedded through another library's model is not reopened with a Polaris one."""
    from llama_index.core import Document, StorageContext, VectorStoreIndex
    from llama_index.core.embeddings import MockEmbedding

    import pytest

    from llama_index_polaris import PolarisVectorStore
    from llama_index_polaris.engine.errors import InputError

    store = PolarisVectorStore(db_path=str(tmp_path / "mock.db"), embed_model=MockEmbedding(embed_dim=8))
    VectorStoreIndex.from_documents([Document(text="# A\n\nalpha beta")], embed_model=MockEmbedding(embed_dim=8),
                                    storage_context=StorageContext.from_defaults(vector_store=store))
    store.close()
    reopened = PolarisVectorStore(db_path=str(tmp_path / "mock.db"))
    with pytest.raises(InputError, match="was embedded by MockEmbedding.*not a Polaris model: pass that model"):
        reopened.as_index()
    reopened.close()
