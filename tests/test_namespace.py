"""LlamaIndex's own import paths (llama_index.<kind>.polaris) are the same classes, in an
editable install and in a wheel, and the llama_index namespace stays whole."""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

import llama_index_polaris

ROOT = Path(__file__).parent.parent
PATHS = {
    "llama_index.vector_stores.polaris": "PolarisVectorStore",
    "llama_index.embeddings.polaris": "PolarisEmbedding",
    "llama_index.retrievers.polaris": "PolarisRetriever",
    "llama_index.node_parser.polaris": "PolarisNodeParser",
}


@pytest.mark.parametrize("module, name", PATHS.items())
def test_llamaindex_import_path_is_the_same_class(module, name):
    assert getattr(importlib.import_module(module), name) is getattr(llama_index_polaris, name)
    assert importlib.import_module(module).__all__ == [name]


def test_namespace_keeps_llama_index_core_and_other_integrations(tmp_path, monkeypatch):
    # another distribution's portion of the same namespaces, installed elsewhere on the path (as
    # llama-index-retrievers-bm25 lays out its llama_index/retrievers/bm25): still importable beside ours
    other = tmp_path / "site" / "llama_index" / "retrievers" / "otherdist"
    other.mkdir(parents=True)
    (other / "__init__.py").write_text("NAME = 'otherdist'\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    import llama_index
    import llama_index.core
    import llama_index.retrievers.polaris
    import llama_index.retrievers.otherdist

    assert llama_index.retrievers.otherdist.NAME == "otherdist"
    assert llama_index.retrievers.polaris.PolarisRetriever is llama_index_polaris.PolarisRetriever

    assert getattr(llama_index, "__file__", None) is None  # still a namespace package
    assert not (ROOT / "llama_index" / "__init__.py").exists()
    assert sorted((ROOT / "llama_index").rglob("__init__.py")) == sorted(
        ROOT / "llama_index" / m.split(".")[1] / "polaris" / "__init__.py" for m in PATHS
    )


def test_llamahub_metadata_names_every_class():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["llamahub"]
    assert meta["import_path"] in PATHS
    assert sorted(meta["class_authors"]) == sorted(PATHS.values())


@pytest.mark.slow
def test_wheel_ships_the_import_paths_and_they_import(tmp_path):
    tree = tmp_path / "src"  # a copy: a build in the worktree would leave build/ behind
    for name in ("pyproject.toml", "README.md", "llama_index", "llama_index_polaris", "datasette_polaris"):
        copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copy
        tree.mkdir(exist_ok=True)
        copy(ROOT / name, tree / name, **({"ignore": shutil.ignore_patterns("__pycache__")} if copy is shutil.copytree else {}))
    out = tmp_path / "wheel"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out),
                    str(tree)], check=True, capture_output=True, timeout=300)
    wheel = next(out.glob("llama_index_polaris-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert sorted(n for n in names if n.startswith("llama_index/")) == sorted(
        m.replace(".", "/") + "/__init__.py" for m in PATHS
    )
    target = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(target)
    # the wheel's tree first on the path, the venv (llama_index.core) after it; the editable
    # install's finder is skipped (-S without site, the venv added by hand)
    site = [p for p in sys.path if p.endswith("site-packages")]
    code = (
        "import sys; sys.path[:0] = sys.argv[1:]\n"
        "import llama_index.vector_stores.polaris as v, llama_index.node_parser.polaris as n, llama_index.core\n"
        "import llama_index_polaris\n"
        "print(v.__file__.startswith(sys.argv[1]), llama_index_polaris.__file__.startswith(sys.argv[1]),"
        " v.PolarisVectorStore is llama_index_polaris.PolarisVectorStore)\n"
    )
    run = subprocess.run([sys.executable, "-S", "-c", code, str(target), *site], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["True", "True", "True"]
