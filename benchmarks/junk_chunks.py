"""Junk chunks per documentation set: chunks whose text is mostly blob (#37 item 2).

    python benchmarks/junk_chunks.py [NAME ...] [--detector PATH] [--json]

Every Markdown file of each set is chunked as ``polaris index`` chunks it (the benchmark
config, the bundled model's tokenizer). A chunk is junk when blobs (``engine/words/blobs.py``: URL
payloads, ``data:`` URIs, base64 and hex runs) are all it has: fewer than ``WORDS`` word
characters are left once they are taken out. ``mostly_blob`` counts the chunks whose stored
text is more than half blob (after #37 a blob rides along with the words around it: such a
chunk is stored as written but embedded and indexed without it). ``--detector`` loads the detector from another file, so the same definition of
junk can count the chunks of an older checkout (``PYTHONPATH=OLD python ... --detector
engine/words/blobs.py``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from docsets import ALL_SETS, load_set  # noqa: E402
from sections import config  # noqa: E402

from llama_index_polaris.engine.embed.embedder import embedder_from_config  # noqa: E402
from llama_index_polaris.engine.ingest.recipe import make_recipe  # noqa: E402

WORDS = 16
WORD_CHAR = re.compile(r"\w")
DETECTOR = Path(__file__).resolve().parents[1] / "llama_index_polaris" / "engine" / "words" / "blobs.py"


def detector(path: Path):
    spec = importlib.util.spec_from_file_location("junk_blobs", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def count(name: str, recipe, blobs) -> dict:
    docs = load_set(name).docs
    chunks = junk = files = mostly = 0
    for path in sorted(p for p in docs.rglob("*") if p.suffix in (".md", ".mdx", ".markdown")):
        text = path.read_text(encoding="utf-8", errors="replace")
        spans = recipe.chunk(text, path=path.name, title=path.name).chunks
        bad = sum(len(WORD_CHAR.findall(blobs.readable(s.text))) < WORDS for s in spans)
        mostly += sum(blobs.is_mostly_blob(s.text) for s in spans)
        chunks, junk, files = chunks + len(spans), junk + bad, files + bool(bad)
    return {"set": name, "chunks": chunks, "junk": junk, "files_with_junk": files, "mostly_blob": mostly}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", default=list(ALL_SETS))
    parser.add_argument("--detector", type=Path, default=DETECTOR)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    cfg = config()
    embedder = embedder_from_config(cfg)
    recipe = make_recipe(cfg, embedder.max_chunk_tokens, embedder.token_counter, model=embedder.model_id)
    blobs = detector(args.detector)
    rows = [count(n, recipe, blobs) for n in args.names]
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    for r in rows:
        print(f"{r['set']:16} chunks {r['chunks']:6}  junk {r['junk']:4}  (files {r['files_with_junk']:3})"
              f"  mostly blob {r['mostly_blob']:4}")


if __name__ == "__main__":
    main()
