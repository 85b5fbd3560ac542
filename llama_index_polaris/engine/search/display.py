"""Search results in a notebook: ``Hits``, the list ``Searcher.search`` returns, renders in
Jupyter (``_repr_html_``) as a table of the fields the Datasette page shows for each hit:
rank, score with its bar, heading path, document and collection, the text with the
query's words marked (from a little before the first of them), and the explanation folded, each
figure with the same label and meaning as the page's (``legend``). The words marked are the
page's: both mark through ``highlight.Highlighter`` with the index's FTS5 tokenizer. A single
``Hit`` renders as its row of the list it came in (``hit_html``). Plain HTML with its own
style, no script: it renders the same in JupyterLab, VS Code and a saved HTML export.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from ..text import html_escape as escape
from ..words.tokenize import DEFAULT_TOKENIZER
from . import legend
from .explain import brief_line
from .highlight import Highlighter

EXCERPT_CHARS = 600  # of a hit's text shown, from a little before its first matched word

STYLE = """<style>
.polaris-hits-repr { font-family: system-ui, sans-serif; font-size: 13px; max-width: 100%; }
.polaris-hits-repr table { border-collapse: collapse; width: 100%; table-layout: fixed; }
.polaris-hits-repr th, .polaris-hits-repr td { text-align: left !important; vertical-align: top !important; padding: 6px 8px !important; border-bottom: 1px solid #dfe3ea !important; background: #fff !important; }
.polaris-hits-repr th { color: #5f6b7a; font-weight: 600; }
.polaris-hits-repr .p-rank { width: 2.2em; color: #2f5bd3; font-weight: 700; }
.polaris-hits-repr .p-score { width: 6.5em; font-variant-numeric: tabular-nums; font-weight: 700; }
.polaris-hits-repr .p-bar { display: block; height: 5px; background: #eef0f3; border-radius: 3px; margin-top: 4px; }
.polaris-hits-repr .p-bar span { display: block; height: 100%; background: #2f5bd3; border-radius: 3px; }
.polaris-hits-repr .p-where { width: 30%; overflow-wrap: anywhere; }
.polaris-hits-repr .p-heading span + span::before { content: " › "; color: #9aa4b2; }
.polaris-hits-repr .p-heading span:last-child { font-weight: 600; }
.polaris-hits-repr .p-doc { color: #5f6b7a; font-size: 12px; }
.polaris-hits-repr .p-tag { background: #eef0f3; border-radius: 4px; padding: 0 4px; margin-left: 4px; }
.polaris-hits-repr .p-stale { color: #8a3d00; font-size: 12px; }
.polaris-hits-repr .p-text { white-space: pre-wrap; overflow-wrap: anywhere; text-align: left; background: #f7f8fa; border-radius: 6px; padding: 4px 6px; max-height: 14em; overflow: auto; }
.polaris-hits-repr mark { background: #fff1a8; }
.polaris-hits-repr summary { cursor: pointer; color: #5f6b7a; margin-top: 4px; }
.polaris-hits-repr dl { display: grid !important; grid-template-columns: repeat(auto-fill, minmax(7.5em, 1fr)); gap: 3px; margin: 4px 0 0 !important; }
.polaris-hits-repr dl div { display: block; background: #f7f8fa; border-radius: 4px; padding: 1px 5px; text-align: left; }
.polaris-hits-repr dt { display: block !important; float: none !important; width: auto !important; margin: 0 !important; color: #5f6b7a; font-size: 11px; font-weight: 500; text-align: left !important; cursor: help; }
.polaris-hits-repr dd { display: block !important; float: none !important; margin: 0 !important; font-weight: 600; font-variant-numeric: tabular-nums; text-align: left !important; }
.polaris-hits-repr details { text-align: left; }
.polaris-hits-repr .p-legend { color: #5f6b7a; font-size: 12px; margin: 4px 0; }
@media (max-width: 640px) {  /* a narrow output: each hit a block, rank and score on its first line */
  .polaris-hits-repr table, .polaris-hits-repr tbody, .polaris-hits-repr tr, .polaris-hits-repr td { display: block; width: auto !important; }
  .polaris-hits-repr thead { display: none; }
  .polaris-hits-repr tr { text-align: left !important; }
  .polaris-hits-repr td.p-rank, .polaris-hits-repr td.p-score { display: inline-block; border: 0 !important; padding-bottom: 0 !important; }
  .polaris-hits-repr td.p-score { width: 8em !important; }
  .polaris-hits-repr td.p-where { border: 0 !important; padding-bottom: 0 !important; }
}
</style>"""


class Hits(list):
    """The hits of one search, best first (a ``list`` of ``Hit``), with the query, mode and
    settings that ranked them and the index's FTS5 tokenizer, so that a notebook can show them
    as the Datasette page does. Each hit keeps them too, to render as its row (``hit_html``)."""

    def __init__(self, hits: Iterable[Any] = (), *, query: str = "", mode: str = "hybrid",
                 settings: Mapping[str, Any] | None = None, tokenizer: str = DEFAULT_TOKENIZER) -> None:
        super().__init__(hits)
        self.query, self.mode, self.settings, self.tokenizer = query, mode, dict(settings or {}), tokenizer
        for hit in self:
            hit.shown_as = self.shown_as  # not a field of the hit: its JSON is unchanged

    @property
    def no_good_match(self) -> bool:
        """Whether no hit matches well (each hit's ``good_match``, which the engine decides; True
        for no hits): the answer to "did anything match?" that every door shows."""
        return not any(getattr(h, "good_match", False) for h in self)

    @property
    def best_strength(self) -> float | None:
        """The highest match strength among the hits (None: no hit has one)."""
        values = [h.strength for h in self if getattr(h, "strength", None) is not None]
        return max(values) if values else None

    @property
    def no_match_note(self) -> str | None:
        """The sentence a door shows when no hit matches well (``strength.no_match_note``), else None."""
        from .strength import no_match_note

        return no_match_note(self.best_strength) if self.no_good_match else None

    @property
    def shown_as(self) -> tuple[str, str, dict[str, Any], str]:
        """(query, mode, settings, tokenizer): what the table of these hits is drawn from."""
        return self.query, self.mode, self.settings, self.tokenizer

    def __getitem__(self, item: Any) -> Any:
        """A hit, or for a slice the hits in it (still shown as a table)."""
        got = super().__getitem__(item)
        if isinstance(item, slice):
            return Hits(got, query=self.query, mode=self.mode, settings=self.settings, tokenizer=self.tokenizer)
        return got

    def _repr_html_(self) -> str:
        """The table Jupyter shows (``hits_html``)."""
        return hits_html(self, self.query, self.mode, self.settings, self.tokenizer)


def hit_html(hit: Any) -> str:
    """One hit as Jupyter shows it (``Hit._repr_html_``): its row of the table of the list it came in."""
    query, mode, settings, tokenizer = getattr(hit, "shown_as", ("", "hybrid", {}, DEFAULT_TOKENIZER))
    lead = f"Hit {hit.rank} for <q>{escape(query)}</q> ({escape(mode)})."
    return hits_html([hit], query, mode, settings, tokenizer, lead=lead)


def hits_html(hits: Iterable[Any], query: str, mode: str, settings: Mapping[str, Any],
              tokenizer: str = DEFAULT_TOKENIZER, *, lead: str | None = None) -> str:
    """The hits as one HTML table (see the module's docstring); ``lead`` replaces the count line's start."""
    hits = list(hits)
    if not hits:
        return f'<div class="polaris-hits-repr">{STYLE}<p>No hits for <q>{escape(query)}</q>.</p></div>'
    cols = legend.columns(mode, settings)
    marker = Highlighter(query, tokenizer)
    marker.prime(h.text for h in hits)  # one FTS5 query for the table
    rows = "".join(_row(h, marker, cols) for h in hits)
    formula = escape(legend.formula(mode, settings)) if settings else ""
    if lead is None:
        lead = f'{len(hits)} hit{"s" if len(hits) != 1 else ""} for <q>{escape(query)}</q> ({escape(mode)}).'
    return (
        f'<div class="polaris-hits-repr">{STYLE}<p class="p-legend">{lead} {formula}</p>'
        '<table><thead><tr><th class="p-rank">#</th><th class="p-score">Score</th><th class="p-where">Heading path'
        f' · document</th><th>Text · why it ranked</th></tr></thead><tbody>{rows}</tbody></table></div>'
    )


def _row(h: Any, marker: Highlighter, cols: list[legend.Column]) -> str:
    parts = "".join(f"<span>{escape(p)}</span>" for p in (h.heading_path or "(no heading)").split(" > "))
    stale = f'<div class="p-stale">stale: {escape(h.document_error or "")}</div>' if h.document_status == "stale" else ""
    figures = "".join(
        f'<div><dt title="{escape(c.meaning)}">{escape(c.label)}</dt><dd>{legend.fmt(getattr(h.explain, c.key), c.digits)}</dd></div>'
        for c in cols
    )
    width = max(0.0, min(1.0, h.score)) * 100
    return (
        f'<tr class="p-hit"><td class="p-rank">{h.rank}</td>'
        f'<td class="p-score">{h.score:.3f}<span class="p-bar"><span style="width: {width:.1f}%"></span></span></td>'
        f'<td class="p-where"><div class="p-heading">{parts}</div>'
        f'<div class="p-doc">{escape(h.document)}<span class="p-tag">{escape(h.collection)}</span>'
        f' chunk {h.chunk_id}</div>{stale}</td>'
        f'<td><div class="p-text">{excerpt_html(h.text, marker)}</div>'
        f'<details><summary>Why: {escape(brief_line(h.explain))}</summary><dl>{figures}</dl></details></td></tr>'
    )


def excerpt_html(text: str, marker: Highlighter | str, chars: int = EXCERPT_CHARS) -> str:
    """``text`` from a little before its first marked word, at most ``chars`` of it, escaped, the
    words ``marker`` (a ``Highlighter``, or a query under the default tokenizer) matched marked."""
    marker = Highlighter(marker) if isinstance(marker, str) else marker
    spans = marker.spans(text)
    start = max(0, (spans[0][0] if spans else 0) - chars // 5)
    if start:
        start = (text.rfind("\n", 0, start) + 1) or (text.find(" ", start) + 1) or start
    end = min(len(text), start + chars)
    return ("[…] " if start else "") + marker.mark(text, start, end) + (" […]" if end < len(text) else "")
