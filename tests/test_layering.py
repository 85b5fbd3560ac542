"""The engine never imports llama_index, datasette or mcp; adapters and plugins load on first use."""

from __future__ import annotations

import ast
import json
import subprocess
from pathlib import Path
from typing import Callable

import pytest

from polaris_testing import REPO

PACKAGE = REPO / "llama_index_polaris"
ENGINE = PACKAGE / "engine"
FRAMEWORKS = ("llama_index", "datasette", "mcp", "mcp_types")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def engine_modules() -> list[str]:
    """Every module under engine/, found on disk (so namespace directories count too)."""
    return sorted(module_name(p) for p in ENGINE.rglob("*.py"))


def is_framework(name: str) -> bool:
    return any(name == f or name.startswith(f + ".") for f in FRAMEWORKS)


def framework_imports(path: Path) -> list[str]:
    """Imports of a framework (``FRAMEWORKS``) in ``path``: import statements and import_module("...")."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [f"{path.name}:{node.lineno} import {a.name}" for a in node.names if is_framework(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and is_framework(node.module or ""):
            found.append(f"{path.name}:{node.lineno} from {node.module}")
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            arg = node.args[0].value
            if called in ("import_module", "__import__") and isinstance(arg, str) and is_framework(arg):
                found.append(f"{path.name}:{node.lineno} {called}({arg!r})")
    return found


def test_the_static_check_recognises_framework_imports(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import os\nimport llama_index_polaris.engine\nimport llama_index.core\n"
        "from datasette import hookimpl\nfrom ..llama_index import x\n"
        "import importlib\nimportlib.import_module('datasette.app')\n"
        "from mcp.server.mcpserver import MCPServer\nimport mcp_server\nfrom ..mcp_server import serve\n"
    )
    assert sorted(framework_imports(sample)) == [
        "sample.py:3 import llama_index.core",
        "sample.py:4 from datasette",
        "sample.py:7 import_module('datasette.app')",
        "sample.py:8 from mcp.server.mcpserver",
    ]


COMMAND_LINE = ("argparse", "tqdm", "llama_index_polaris.cli")


def test_the_engine_holds_no_command_line_code() -> None:
    """argparse, progress bars and printing belong to cli.py; the engine returns values."""
    offenders = []
    for path in sorted(ENGINE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            offenders += [f"{path.name}:{node.lineno} {n}" for n in names if n.split(".")[0] in COMMAND_LINE
                          or n in COMMAND_LINE]
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "print":
                offenders.append(f"{path.name}:{node.lineno} print()")
    # a model download draws its own progress bar, whichever door asked for the model (as huggingface_hub does)
    assert [o for o in offenders if not (o.startswith("download.py:") and o.endswith(" tqdm"))] == []


def test_no_engine_file_imports_a_framework() -> None:
    files = sorted(ENGINE.rglob("*.py"))
    assert len(files) >= 8  # config, errors, hookspecs, plugins, store, db/...
    offenders = [hit for path in files for hit in framework_imports(path)]
    assert offenders == []


IMPORT_ALL = """
import importlib, json, sys
names = json.loads(sys.argv[1])
import llama_index_polaris, llama_index_polaris.engine
FRAMEWORKS = ("llama_index", "datasette", "mcp", "mcp_types")
after_package = sorted(m for m in sys.modules if m.split(".")[0] in FRAMEWORKS)
failed = {}
for name in names:
    try:
        importlib.import_module(name)
    except Exception as exc:
        failed[name] = f"{type(exc).__name__}: {exc}"
from llama_index_polaris.engine.plugins import plugin_manager
print(json.dumps({
    "after_package": after_package,
    "frameworks": sorted(m for m in sys.modules if m.split(".")[0] in FRAMEWORKS),
    "failed": failed,
    "plugins_built": plugin_manager.cache_info().currsize,
    "imported": [n for n in names if n in sys.modules],
}))
"""


def run_script(run_python: Callable[..., subprocess.CompletedProcess], script: str, *args: str) -> dict:
    code = "import sys; sys.argv[1:] = " + repr(list(args)) + "\n" + script
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_importing_every_engine_module_imports_no_framework(
    run_python: Callable[..., subprocess.CompletedProcess]
) -> None:
    names = engine_modules()
    assert "llama_index_polaris.engine.sqlite.store" in names and "llama_index_polaris.engine.sqlite.schema" in names
    got = run_script(run_python, IMPORT_ALL, json.dumps(names))
    assert got["failed"] == {}
    assert got["imported"] == names
    assert got["after_package"] == []
    assert got["frameworks"] == []
    assert got["plugins_built"] == 0  # importing is not loading plugins


LAZY_ADAPTERS = """
import importlib.util, json, sys
import llama_index_polaris as lip
report = {"dir": dir(lip), "before": "llama_index" in sys.modules, "adapters": {}}
for name, module in lip._ADAPTERS.items():
    if importlib.util.find_spec(module) is None:
        continue
    value = getattr(lip, name)
    report["adapters"][name] = [value.__name__, value.__module__, "llama_index" in sys.modules]
try:
    lip.NoSuchThing
except AttributeError as exc:
    report["missing"] = str(exc)
print(json.dumps(report))
"""


def test_adapters_are_imported_on_first_use(run_python: Callable[..., subprocess.CompletedProcess]) -> None:
    got = run_script(run_python, LAZY_ADAPTERS)
    assert got["before"] is False
    assert {"PolarisNodeParser", "PolarisEmbedding", "PolarisVectorStore", "PolarisRetriever"} <= set(got["dir"])
    assert got["missing"] == "module 'llama_index_polaris' has no attribute 'NoSuchThing'"
    if not got["adapters"]:
        pytest.skip("no adapter module exists yet")
    for name, (cls_name, module, framework_loaded) in got["adapters"].items():
        assert cls_name == name
        assert module.startswith("llama_index_polaris.")
        assert framework_loaded  # an adapter is the place where llama_index comes in


PLUGINS = """
import json, sys
import llama_index_polaris.engine
from llama_index_polaris.engine import plugins
built_before = plugins.plugin_manager.cache_info().currsize
loaded_before = [m for m in plugins.DEFAULT_PLUGINS if m in sys.modules]
pm = plugins.plugin_manager()
print(json.dumps({
    "built_before": built_before,
    "loaded_before": loaded_before,
    "registered": sorted(n for n, _ in pm.list_name_plugin()),
    "hooks": sorted(h for h in dir(pm.hook) if h.startswith("register_")),
    "same": pm is plugins.plugin_manager(),
}))
"""


def test_plugins_load_on_first_use(run_python: Callable[..., subprocess.CompletedProcess]) -> None:
    got = run_script(run_python, PLUGINS)
    assert got["built_before"] == 0
    assert got["loaded_before"] == []
    assert got["hooks"] == ["register_chunkers", "register_embedding_models"]
    assert set(got["registered"]) >= {"llama_index_polaris.engine.embed.builtin",
                                      "llama_index_polaris.engine.chunk"}
    assert got["same"] is True


def test_hookspecs_are_documented() -> None:
    from llama_index_polaris.engine import hookspecs

    hooks = [n for n in dir(hookspecs) if n.startswith("register_")]
    assert hooks and all(getattr(hookspecs, n).__doc__ for n in hooks)


# -- the storage contract (#26): ranking imports neither backend, and the backends import no circle --
def static_imports(path: Path) -> set[str]:
    """The engine modules ``path`` imports anywhere (top level or inside functions), resolved."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    known = set(engine_modules())
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            bases = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            prefix = node.module if node.level == 0 else ".".join(p for p in (base, node.module) if p)
            bases = [prefix or ""] + [f"{prefix}.{a.name}" for a in node.names]
        else:
            continue
        found |= {b for b in bases if b in known}
    # a module's own packages are imported before it whatever it says: ``from . import x`` is x
    ancestors = {module.rsplit(".", i)[0] for i in range(1, module.count(".") + 1)}
    return found - {module} - ancestors


def import_graph() -> dict[str, set[str]]:
    return {module_name(p): static_imports(p) for p in sorted(ENGINE.rglob("*.py"))}


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


E = "llama_index_polaris.engine."
RANKING = [E + "search." + m for m in ("rank", "fuse", "boost", "mmr", "normalise", "explain", "pipeline", "literal",
                                       "context", "terms")]
BACKEND_MODULES = (E + "sqlite", E + "postgres", E + "backends")


def is_backend(name: str) -> bool:
    return any(name == b or name.startswith(b + ".") for b in BACKEND_MODULES)


def test_the_static_import_graph_is_read_right() -> None:
    graph = import_graph()
    assert E + "sqlite.postings" in graph[E + "sqlite.schema"]  # a function-level relative import counts
    assert E + "storage" in graph[E + "search.pipeline"]
    assert {E + "sqlite.store", E + "postgres"} <= reachable(graph, E + "backends")


def test_ranking_code_imports_neither_backend() -> None:
    """rank() and the Searcher reach storage only through the contract (engine/storage.py)."""
    graph = import_graph()
    offenders = {m: sorted(n for n in reachable(graph, m) if is_backend(n)) for m in RANKING}
    assert {m: found for m, found in offenders.items() if found} == {}


def test_no_backend_module_is_part_of_an_import_circle() -> None:
    """db/schema -> search/postings -> db/connect was such a circle: keeping the BM25 lists is the
    SQLite backend's job (sqlite/postings.py), scoring from them too (sqlite/bm25_postings.py)."""
    graph = import_graph()
    circles = sorted(m for m in graph if is_backend(m) and m in reachable(graph, m))
    assert circles == []
    assert not any(n.startswith(E + "search.") and n != E + "search.terms" for n in
                   graph[E + "sqlite.postings"] | graph[E + "sqlite.schema"])


def test_the_postgres_backend_does_not_import_the_sqlite_one() -> None:
    graph = import_graph()
    sqlite_side = {m for m in graph if m == E + "sqlite" or m.startswith(E + "sqlite.")}
    found = {m: sorted(reachable(graph, m) & sqlite_side) for m in graph if m.startswith(E + "postgres")}
    assert {m: f for m, f in found.items() if f} == {}


# -- the layout (#35): search reads storage through the contract only, config sits at the bottom, no circle --
SEARCH = sorted(m for m in import_graph() if m.startswith(E + "search."))
BOTTOM = {E + m for m in ("errors", "paths", "text", "masking")}  # what config may import: nothing of the pipeline


def test_no_search_module_imports_a_backend() -> None:
    """Every module of engine/search/ (not only the ranking ones) reaches storage through engine/storage/."""
    graph = import_graph()
    assert len(SEARCH) >= 10
    offenders = {m: sorted(n for n in reachable(graph, m) if is_backend(n)) for m in SEARCH}
    assert {m: found for m, found in offenders.items() if found} == {}


def test_backends_py_is_the_one_module_that_imports_a_backend() -> None:
    """Above the two backend folders the engine knows the storage contract only (the adapters
    outside engine/, the Datasette plugin for one, may know the SQLite file)."""
    graph = import_graph()
    outside = {m: sorted(n for n in found if is_backend(n) and n != E + "backends")
               for m, found in graph.items() if not is_backend(m)}
    assert {m: found for m, found in outside.items() if found} == {}
    assert {E + "sqlite.store", E + "postgres"} <= graph[E + "backends"] | reachable(graph, E + "backends")


def test_config_imports_nothing_of_the_pipeline() -> None:
    graph = import_graph()
    assert reachable(graph, E + "config") <= BOTTOM
    assert all(graph[m] <= BOTTOM for m in BOTTOM)  # and the bottom imports only the bottom


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of ``graph``: each strongly connected set of two or more modules, sorted."""
    found = []
    for m in sorted(graph):
        if m in reachable(graph, m) and not any(m in c for c in found):
            found.append(sorted(n for n in reachable(graph, m) if m in reachable(graph, n)))
    return found


def test_circles_are_found() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e2"}, "e2": {"e"}}
    assert circles(graph) == [["a", "b", "c"], ["e", "e2"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle_in_the_engine() -> None:
    """Imports go one way (config and text at the bottom, the facade index.py at the top), so any module
    can be read, and imported, without the ones above it."""
    assert circles(import_graph()) == []
