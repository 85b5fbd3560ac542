"""The score legend: the engine's (``engine.search.legend``), shared with the notebook view."""

from llama_index_polaris.engine.search.legend import COLUMNS_BY_MODE, DIGITS, LABELS, Column, candidates, columns, fmt, formula

__all__ = ["COLUMNS_BY_MODE", "DIGITS", "LABELS", "Column", "candidates", "columns", "fmt", "formula"]
