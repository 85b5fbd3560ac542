"""Tokens an agent receives from `polaris mcp`, against reading the whole file, on the doc sets.

    python benchmarks/mcp_tokens.py [NAME ...] [--split all|train|test] [--k 5] [--section-tokens 300]

For every labelled question of each set (``benchmarks/docsets/``, indexes cached by
``benchmarks/sections.py index``), the MCP door's own functions (``mcp_server.search`` and
``mcp_server.read_section``, what the server runs for a tool call; the transport adds only
the JSON-RPC envelope) answer it on the cached index, and the tokens are counted:

- ``file``: the whole file that holds the answer (the file of the question's best-graded
  labelled section), what an agent without sections reads;
- ``search``: a ``search`` answer at the defaults (k hits, each section's text up to
  ``section_tokens``), as its text content (what a client that reads ``content`` gives the
  model) and as its structured content serialised (``json``: what Claude Code and VS Code give
  the model instead, when a result has structured content); ``full``: the same with
  ``full: true`` (every field of ``Hit.to_dict``);
- ``section``: a ``read_section`` answer of the labelled section (text and position, default
  budget 2,000 tokens), text and JSON likewise: "one section rather than a whole file";
- ``found@k``: the share of questions whose labelled section is among the k hits (the
  search answer holds the answer).

Tokens are an LLM's: tiktoken's ``cl100k_base`` (the copy llama-index-core ships; no
network). The engine's budgets count the embedding model's tokens; the ratio of the two on
the files is reported too. markdown-memory advertises 13,914 -> 2,597 tokens for one
question; these are the same two quantities (whole file, answer) over every question.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, machine_line, publish, table  # noqa: E402
from docsets import ALL_SETS, load_set, section_id  # noqa: E402
from sections import index_path  # noqa: E402

from llama_index_polaris.mcp_server import LIMITS, Door, read_section, search  # noqa: E402


def llm_tokens() -> Any:
    from llama_index.core.utils import get_tokenizer  # sets TIKTOKEN_CACHE_DIR to its bundled copy

    encode = get_tokenizer()
    return lambda text: len(encode(text))


def best_label(rels: dict[str, int]) -> str:
    return max(rels, key=lambda s: (rels[s], s))


def measure_set(name: str, split: str, k: int, section_tokens: int, count: Any) -> dict[str, Any]:
    ds = load_set(name)
    db = index_path(ds)
    if not db.exists():
        raise SystemExit(f"{db}: no cached index; run `python benchmarks/sections.py index {name}` first.")
    door = Door(_config(db))
    qrels = ds.all_qrels if split == "all" else ds.split(split)
    rows = []
    model_ratio = []
    for qid, rels in sorted(qrels.items()):
        if not rels:
            continue
        relpath, heading = best_label(rels).split("#", 1)
        query = ds.queries[qid]["text"]
        answer, text = search(door, query, k, "hybrid", None, None, section_tokens)
        every, _ = search(door, query, k, "hybrid", None, None, section_tokens, full=True)
        found = {section_id(h["document"], h["heading_path"]) for h in answer["hits"]} & set(rels)
        section, section_text = read_section(door, relpath, heading, None, None, LIMITS["read_tokens_default"], False)
        file_text = (ds.docs / relpath).read_text(encoding="utf-8")
        rows.append({
            "qid": qid, "file": count(file_text), "search": count(text), "search_json": count(_json(answer)),
            "search_full_json": count(_json(every)),
            "section": count(section_text), "section_json": count(_json(section)), "found": bool(found),
        })
        model_ratio.append(door.index.count_tokens(file_text) / max(count(file_text), 1))
    door.close()
    return {"set": name, "questions": len(rows), "rows": rows,
            "model_per_llm_token": statistics.median(model_ratio) if model_ratio else float("nan")}


def _json(value: Any) -> str:
    """Structured content as a client serialises it for the model (compact JSON)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _config(db: Path) -> Any:
    """The benchmarks' config (``sections.config``: defaults, the bundled model) on ``db``."""
    from common import out_dir

    from llama_index_polaris.engine.config import load_config

    return load_config(model_id="all-minilm-l6-v2", use_user_config=False, config_file=None,
                       project_root=out_dir(), db_path=str(db))


def summarise(result: dict[str, Any]) -> dict[str, Any]:
    rows = result["rows"]
    med = {key: statistics.median(r[key] for r in rows) for key in ("file", "search", "search_json", "search_full_json",
                                                                    "section", "section_json")}
    total = {key: sum(r[key] for r in rows) for key in ("file", "search", "search_json", "section")}
    return {"set": result["set"], "questions": result["questions"], **{f"median_{k}": v for k, v in med.items()},
            **{f"total_{k}": v for k, v in total.items()},
            "found": sum(r["found"] for r in rows) / max(len(rows), 1),
            "model_per_llm_token": result["model_per_llm_token"]}


def render(results: dict[str, Any]) -> str:
    def row(label: str, s: dict[str, Any]) -> list[Any]:
        return [label, s["questions"], f"{s['median_file']:,.0f}", f"{s['median_search']:,.0f}",
                f"{s['median_search_json']:,.0f}", f"{s['median_search_full_json']:,.0f}", f"{s['median_section']:,.0f}",
                f"{s['median_section_json']:,.0f}",
                f"{s['total_file'] / max(s['total_search_json'], 1):.1f}x", f"{s['found']:.2f}"]

    rows = [row(s["set"], s) for s in results["sets"]] + [row("**all**", results["pooled"])]
    head = (f"Tokens (cl100k_base, median per question) an agent receives, split {results['split']},"
            f" search k={results['k']}, section_tokens={results['section_tokens']}; {machine_line(results['machine'])}\n\n")
    return head + table(["set", "questions", "whole file", "search, text", "search, JSON", "search, JSON (full)",
                         "read_section, text",
                         "read_section, JSON", "files / search JSON, summed", f"found@{results['k']}"], rows)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", default=list(ALL_SETS))
    ap.add_argument("--split", default="all", choices=("all", "train", "test"))
    ap.add_argument("--k", type=int, default=LIMITS["k_default"])
    ap.add_argument("--section-tokens", type=int, default=LIMITS["section_tokens_default"])
    args = ap.parse_args(argv)
    count = llm_tokens()
    raw = [measure_set(n, args.split, args.k, args.section_tokens, count) for n in args.names]
    pooled_rows = [r for res in raw for r in res["rows"]]
    pooled = summarise({"set": "all", "questions": len(pooled_rows), "rows": pooled_rows,
                        "model_per_llm_token": statistics.median(res["model_per_llm_token"] for res in raw)})
    results = {"split": args.split, "k": args.k, "section_tokens": args.section_tokens, "machine": machine(),
               "sets": [summarise(r) for r in raw], "pooled": pooled, "rows": {r["set"]: r["rows"] for r in raw}}
    publish("mcp_tokens", results, render)


if __name__ == "__main__":
    main()
