"""A simple bigram-BM25 baseline for the CJK sets (#36): what a user could write by hand.

    python benchmarks/bigram_bm25.py [NAME ...] [--cut jieba|janome]   # default: react-zh vue-ja, bigrams
    python benchmarks/sections.py score NAME --peer benchmarks/out/bigram-bm25.jsonl

Each section the engine's chunker makes (``docsets.engine_sections``: its chunks' text
joined, the heading path in front) is one BM25 document. Terms: lower-cased ``\\w+`` words,
each run of Han, kana or Hangul cut into overlapping character bigrams (a lone character
stays); no stemming, no stop words. Okapi BM25 with k1 = 1.2, b = 0.75 and the Lucene idf
``ln(1 + (N - n + 0.5) / (n + 0.5))``; the query's distinct terms are summed. No code of the
engine's terms is used (``bigrams.py`` is what it is compared with). Writes the ten best
sections of every question as a peer run for ``sections.py score --peer``. ``--cut`` puts a
dictionary segmenter from PyPI in the bigrams' place (jieba's search mode for Chinese, janome
for Japanese; neither is a dependency of Polaris): the same BM25 with its words as terms,
written to ``<cut>-bm25.jsonl``.

``--ablate`` (train questions) moves the baseline toward Polaris's BM25 one difference at a time,
to say where the gap on natural-language questions comes from: CJK runs cut by script
(``bigrams.spaced``, as the engine), FTS5's idf ``ln((N - n + 0.5) / (n + 0.5))`` (floored
near 0: a term in over half the units weighs nothing), and chunks as the units (a section at its
best chunk), then all three, which is Polaris's BM25 list.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import out_dir  # noqa: E402
from docsets import engine_files, engine_sections, load_set  # noqa: E402

CJK = re.compile(r"[\u3041-\u309f\u30a1-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7a3\uf900-\ufaff]+")
K1, B, K = 1.2, 0.75, 10
CUT = None  # a dictionary segmenter for CJK runs (``--cut``), else bigrams


def cut(run: str) -> list[str]:
    if CUT == "jieba":
        import jieba

        return [w for w in jieba.cut_for_search(run) if w.strip()]
    from janome.tokenizer import Tokenizer

    global _JANOME
    _JANOME = globals().get("_JANOME") or Tokenizer(wakati=True)
    return [w for w in _JANOME.tokenize(run) if w.strip()]


def terms(text: str) -> list[str]:
    out = []
    for word in re.findall(r"\w+", CJK.sub(lambda m: f" {m.group()} ", text.lower())):
        if CJK.fullmatch(word) and CUT:
            out += cut(word)
        elif CJK.fullmatch(word):
            out += [word] if len(word) == 1 else [word[i:i + 2] for i in range(len(word) - 1)]
        else:
            out.append(word)
    return out


def sections(docs: Path) -> dict[tuple[str, str], str]:
    """(relpath, heading path) -> the section's text (its chunks' spans of the file, heading path first)."""
    files = dict(engine_files(docs))
    out: dict[tuple[str, str], list[str]] = {}
    for rel, chunks in engine_sections(docs).items():
        text = files[rel].read_bytes().decode("utf-8-sig")
        for heading, start, end in chunks:
            out.setdefault((rel, heading), [heading]).append(text[start:end])
    return {key: "\n".join(parts) for key, parts in out.items()}


def rank(docs: dict[tuple[str, str], str], queries: dict[str, str]) -> dict[str, list[tuple[str, str]]]:
    keys = list(docs)
    counts = [Counter(terms(docs[k])) for k in keys]
    lengths = [sum(c.values()) for c in counts]
    avg, n = sum(lengths) / len(lengths), len(keys)
    df = Counter(t for c in counts for t in c)
    out = {}
    for qid, text in queries.items():
        q = set(terms(text))
        idf = {t: math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5)) for t in q if df[t]}
        scores = [sum(idf[t] * c[t] * (K1 + 1) / (c[t] + K1 * (1 - B + B * dl / avg)) for t in idf if t in c)
                  for c, dl in zip(counts, lengths)]
        best = sorted(range(n), key=lambda i: (-scores[i], i))[:K]
        out[qid] = [keys[i] for i in best if scores[i] > 0]
    return out


def units(docs: Path, chunked: bool) -> dict[tuple, str]:
    """The BM25 units: sections (as ``sections``) or each chunk alone, keyed (relpath, heading path[, n])."""
    files = dict(engine_files(docs))
    out: dict[tuple, list[str]] = {}
    for rel, chunks in engine_sections(docs).items():
        text = files[rel].read_bytes().decode("utf-8-sig")
        for n, (heading, start, end) in enumerate(chunks):
            out.setdefault((rel, heading, n) if chunked else (rel, heading), [heading]).append(text[start:end])
    return {key: "\n".join(parts) for key, parts in out.items()}


def ablate(names: list[str]) -> None:
    """nDCG@10 on train, by kind of question, of the baseline with each of Polaris's differences."""
    from docsets import section_id
    from sections import questions, score_query

    from llama_index_polaris.engine.words.bigrams import spaced

    def by_script(text: str) -> list[str]:
        return re.findall(r"\w+", spaced(text.lower()))

    variants = {"baseline": (terms, False, False), "cut by script": (by_script, False, False),
                "FTS5 idf": (terms, True, False), "chunks as units": (terms, False, True),
                "all three (Polaris's list)": (by_script, True, True)}
    print("| set | variant | all | paraphrase | identifier | mixed |\n|---|---|---|---|---|---|")
    for name in names:
        ds = load_set(name)
        _, qids = questions(ds, "train")
        rels = ds.split("train")
        for label, (cut_terms, fts_idf, chunked) in variants.items():
            docs = units(ds.docs, chunked)
            keys = list(docs)
            counts = [Counter(cut_terms(docs[k])) for k in keys]
            lengths = [sum(c.values()) for c in counts]
            avg, n = sum(lengths) / len(lengths), len(keys)
            df = Counter(t for c in counts for t in c)
            by_kind: dict[str, list[float]] = {}
            for q in qids:
                asked = {t for t in cut_terms(ds.queries[q]["text"]) if df[t]}
                idf = {t: max(1e-6, math.log((n - df[t] + 0.5) / (df[t] + 0.5))) if fts_idf
                       else math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5)) for t in asked}
                scores = [sum(idf[t] * c[t] * (K1 + 1) / (c[t] + K1 * (1 - B + B * dl / avg)) for t in idf if t in c)
                          for c, dl in zip(counts, lengths)]
                shown: list[str] = []
                for i in sorted(range(n), key=lambda i: (-scores[i], i)):
                    if scores[i] <= 0 or len(shown) == K:
                        break
                    sid = section_id(keys[i][0], keys[i][1])
                    shown += [] if sid in shown else [sid]
                by_kind.setdefault(ds.queries[q]["kind"], []).append(score_query(shown, rels[q])["ndcg@10"])
            every = [v for vs in by_kind.values() for v in vs]
            cells = " | ".join(f"{sum(by_kind[k]) / len(by_kind[k]):.3f}" if k in by_kind else "-"
                               for k in ("paraphrase", "identifier", "mixed"))
            print(f"| {name} | {label} | {sum(every) / len(every):.3f} | {cells} |", flush=True)


def main(names: list[str]) -> None:
    path = out_dir() / f"{CUT or 'bigram'}-bm25.jsonl"
    with open(path, "w", encoding="utf-8") as fh:
        for name in names:
            ds = load_set(name)
            run = rank(sections(ds.docs), {q: ds.queries[q]["text"] for q in ds.all_qrels})
            for qid, found in run.items():
                fh.write(json.dumps({"set": name, "qid": qid, "sections": [list(k) for k in found]}, ensure_ascii=False) + "\n")
            print(f"{name}: {len(run)} questions ranked", flush=True)
    print(f"wrote {path}")


if __name__ == "__main__":
    args = sys.argv[1:]
    if "--ablate" in args:
        args.remove("--ablate")
        ablate(args or ["react-zh", "vue-ja"])
        sys.exit(0)
    if "--cut" in args:
        at = args.index("--cut")
        CUT, args = args[at + 1], args[:at] + args[at + 2:]
    main(args or ["react-zh", "vue-ja"])
