"""Four writers at once on one Postgres database (#26): two `polaris index` runs (one folder each,
one of them into the collection a LlamaIndex writer also fills) and two processes looping on
`PolarisVectorStore.add()`. No error, no lost and no duplicated document, every count agreeing.

CI runs it once; `POLARIS_PG_RUNS=50 pytest -m slow tests/test_pg_writers.py` runs it 50 times (the
suite alone skips that test: until now it ran all 50 in every suite run, CI's included)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import database_uri
from llama_index_polaris.engine.postgres import PgStore

MODEL = "all-minilm-l6-v2"
POLARIS = str(Path(sys.executable).with_name("polaris"))
FILES = 6
NODES = 8

ADDER = r"""
import sys
from llama_index.core.schema import MetadataMode, NodeRelationship, RelatedNodeInfo, TextNode
from llama_index_polaris import PolarisEmbedding, PolarisVectorStore
from llama_index_polaris.engine.config import load_config
uri, who, n, collection, root = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
embed = PolarisEmbedding(model_id="all-minilm-l6-v2")
store = PolarisVectorStore(db_path=uri, embed_model=embed, collection=collection,
                           config=load_config(root, use_user_config=False))
for i in range(n):
    node = TextNode(text=f"note {i} from {who}: sessions expire after eight hours", id_=f"{who}-{i}")
    node.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=f"{who}-doc-{i}")
    node.embedding = embed.get_text_embedding(node.get_content(metadata_mode=MetadataMode.EMBED))
    store.add([node])
store.close()
"""


def folder(root: Path, name: str) -> Path:
    path = root / name
    path.mkdir()
    for i in range(FILES):
        (path / f"{name}-{i}.md").write_text(f"# {name} {i}\n\nPage {i} of {name} about token rotation.\n")
    return path


def one_run(root: Path, uri: str) -> None:
    env = {**os.environ, "XDG_CONFIG_HOME": str(root / ".xdg"),
           "PYTHONPATH": str(Path(__file__).parents[1])}
    (root / "adder.py").write_text(ADDER)
    procs = [
        subprocess.Popen([POLARIS, "index", "guides", "--collection", "guides", "--db", uri, "-q"], cwd=root, env=env,
                         stderr=subprocess.PIPE, text=True),
        subprocess.Popen([POLARIS, "index", "notes-files", "--collection", "notes", "--db", uri, "-q"], cwd=root,
                         env=env, stderr=subprocess.PIPE, text=True),
        *(subprocess.Popen([sys.executable, str(root / "adder.py"), uri, who, str(NODES), "notes", str(root)],
                           cwd=root, env=env, stderr=subprocess.PIPE, text=True) for who in ("a", "b")),
    ]
    for p in procs:
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
    with PgStore(uri, readonly=True) as store:
        counts = store.counts()
        assert counts["collections"] == {"guides": {"completed": FILES}, "notes": {"completed": FILES + 2 * NODES}}
        assert counts["documents"] == 2 * FILES + 2 * NODES
        assert store.quick_check() == ["ok"]
        with store.read() as conn:
            assert conn.execute("SELECT count(*), count(DISTINCT node_id) FROM chunks").fetchone() == \
                (counts["chunks"], counts["chunks"])
            assert conn.execute("SELECT count(*) FROM documents WHERE collection = 'notes' AND path IS NOT NULL"
                                " AND path LIKE 'notes-files-%'").fetchone()[0] == FILES


def runs(n: int, root: Path, pg_server: str) -> None:
    import psycopg

    (root / "polaris.toml").write_text(f'model_id = "{MODEL}"\n')
    folder(root, "guides")
    folder(root, "notes-files")
    for i in range(n):
        name = f"polaris_writers_{i}"
        with psycopg.connect(pg_server, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            conn.execute(f"CREATE DATABASE {name}")
        try:
            one_run(root, database_uri(pg_server, name))
        finally:
            with psycopg.connect(pg_server, autocommit=True) as conn:
                conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def test_two_index_runs_and_two_llamaindex_writers_at_once(tmp_path: Path, pg_server: str) -> None:
    runs(1, tmp_path, pg_server)


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("POLARIS_PG_RUNS"), reason="the repeated runs (about 10 minutes for 50)"
                    " are asked for: POLARIS_PG_RUNS=50 pytest -m slow tests/test_pg_writers.py")
def test_fifty_runs_of_four_writers(tmp_path: Path, pg_server: str) -> None:
    runs(int(os.environ["POLARIS_PG_RUNS"]), tmp_path, pg_server)
