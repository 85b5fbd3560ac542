"""Tuning and measuring: retrieval quality on labelled questions (evaluate), the labels (labels),
and fitting the learned fusion to them (fit)."""
