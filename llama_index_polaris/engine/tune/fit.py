"""Fitting the learned fusion to labelled questions (`polaris tune`), and deciding whether to keep it.

The model is ``learned.py``'s: a weighted sum of a hit's explanation features. It is
fitted by pairwise logistic regression (RankNet, linear): for every question, each
labelled section should score above each section of a lower grade in the same candidate
pool, every question weighing the same; ridge-penalised, solved by Newton's method, numpy
only. Whether it helps is decided out of sample: k-fold cross-validation over questions
gives each question an nDCG@10 from a model that never saw it, against today's fixed
fusion on the same candidates, and a paired bootstrap over questions gives a 95% interval
of the mean gain. Weights are kept only when that interval is above 0 (``decide``).

Pure functions over arrays; reading labels and running the questions is in
``tune_labels.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from ..search import learned

FOLDS = 5
RIDGE = 0.1  # chosen on the train splits, leave-one-set-out (docs/search.md, "Learned fusion")
FOCUS = False  # pairs weighted by their nDCG discount: measured worse on the train splits
BOOTSTRAP = 2000
SEED = 27
NEGATIVES = 30  # a relevant section is compared with the lower-graded sections among the fixed fusion's first this many


@dataclass(frozen=True)
class Sample:
    """One labelled question: its first pool's sections (in the fixed fusion's order) as
    feature rows, each one's grade and the label it matches (-1: none; a label matched by
    several sections, a whole document, counts once, at the first), and the grade of every
    label (the ideal)."""

    x: np.ndarray
    grades: np.ndarray
    labels: np.ndarray
    ideal: tuple[float, ...]


def ndcg10(grades_in_order: Sequence[float], ideal: Sequence[float]) -> float:
    """nDCG@10 with linear gains (as ``evaluate.ndcg_at_k``)."""
    def dcg(gs: Sequence[float]) -> float:
        return sum(g / np.log2(i + 2) for i, g in enumerate(gs[:10]))

    best = dcg(sorted(ideal, reverse=True))
    return dcg(list(grades_in_order)) / best if best > 0 else 0.0


def ranked_ndcg(s: Sample, w: np.ndarray) -> float:
    """nDCG@10 of the sample's pool ordered by the model with weights ``w`` (ties: the fixed order)."""
    order = np.argsort(-learned.scores(s.x, w), kind="stable") if len(s.x) else np.zeros(0, dtype=int)
    seen: set[int] = set()
    gains = []
    for i in order[:10]:
        label = int(s.labels[i])
        gains.append(s.grades[i] if label >= 0 and label not in seen else 0.0)
        seen.add(label)
    return ndcg10(gains, s.ideal)


def _pairs(samples: Sequence[Sample], focus: bool = FOCUS) -> tuple[np.ndarray, np.ndarray]:
    """Feature differences (better minus worse) of every pair, and each pair's weight; a
    question's weights add up to 1. With ``focus`` a pair weighs what swapping the two would
    change in the fixed order's nDCG discount (LambdaRank's |delta|): pairs at the top count most."""
    diffs, weights = [], []
    discount = 1.0 / np.log2(np.arange(len(max(samples, key=lambda s: len(s.x)).x) if samples else 0) + 2.0)
    for s in samples:
        head = np.arange(min(len(s.x), NEGATIVES))
        rows, ws = [], []
        for i in np.flatnonzero(s.grades > 0):
            for j in head[s.grades[head] < s.grades[i]]:
                rows.append(s.x[i] - s.x[j])
                ws.append(abs(discount[i] - discount[j]) * (s.grades[i] - s.grades[j]) if focus else 1.0)
        if rows and sum(ws) > 0:
            diffs.append(np.array(rows))
            weights.append(np.array(ws) / sum(ws))
    if not diffs:
        return np.zeros((0, len(learned.NAMES))), np.zeros(0)
    return np.concatenate(diffs), np.concatenate(weights)


def fit(samples: Sequence[Sample], ridge: float = RIDGE, iterations: int = 30, focus: bool = FOCUS) -> np.ndarray:
    """Weights (``learned.NAMES`` order) of the pairwise logistic model, or the identity when the
    samples hold no pair to learn from. Every weight but ``fixed`` (today's ranking) is
    ridge-penalised on the standardised scale, so a large ``ridge`` gives back the fixed fusion."""
    d, pw = _pairs(samples, focus)
    if len(d) == 0:
        return learned.weight_vector(learned.IDENTITY)
    scale = d.std(axis=0)
    scale[scale == 0] = 1.0
    z = d / scale
    penalty = np.full(z.shape[1], float(ridge))
    penalty[learned.NAMES.index("fixed")] = 1e-4  # nearly free: it only has to stay finite on separable pairs
    v = np.zeros(z.shape[1])
    total = pw.sum()
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(np.clip(z @ v, -50, 50)))  # P(the pair is ordered wrongly)
        grad = -(z * (pw * p)[:, None]).sum(axis=0) / total + penalty * v
        hess = (z * (pw * p * (1 - p))[:, None]).T @ z / total + np.diag(penalty)
        step = np.linalg.solve(hess, grad)
        v -= step
        if np.abs(step).max() < 1e-8:
            break
    return v / scale


def folds(n: int, k: int = FOLDS, seed: int = SEED) -> list[np.ndarray]:
    """``n`` question indices shuffled into ``k`` folds (fewer when there are fewer questions)."""
    order = np.random.default_rng(seed).permutation(n)
    return [f for f in np.array_split(order, min(k, n)) if len(f)]


def first_relevant(s: Sample, w: np.ndarray) -> float:
    """1.0 when the first hit of the sample's pool ordered with ``w`` is relevant, else 0.0."""
    return float(len(s.x) > 0 and s.grades[int(np.argmax(learned.scores(s.x, w)))] > 0)


def cross_validate(samples: Sequence[Sample], k: int = FOLDS, seed: int = SEED,
                   ridge: float = RIDGE) -> dict[str, np.ndarray]:
    """Each question's nDCG@10 and first-hit hit (``hit1``) under the fixed fusion
    (``before``) and under a model fitted on the other folds (``after``)."""
    identity = learned.weight_vector(learned.IDENTITY)
    out = {"before": np.array([ranked_ndcg(s, identity) for s in samples]),
           "hit1_before": np.array([first_relevant(s, identity) for s in samples]),
           "after": np.zeros(len(samples)), "hit1_after": np.zeros(len(samples))}
    for held in folds(len(samples), k, seed) if samples else []:
        held_set = set(held.tolist())
        w = fit([s for i, s in enumerate(samples) if i not in held_set], ridge)
        for i in held:
            out["after"][i], out["hit1_after"][i] = ranked_ndcg(samples[i], w), first_relevant(samples[i], w)
    return out


def paired_interval(diff: np.ndarray, n: int = BOOTSTRAP, seed: int = SEED) -> tuple[float, float, float]:
    """Mean of ``diff`` and its 95% percentile bootstrap interval (questions resampled)."""
    if len(diff) == 0:
        return 0.0, 0.0, 0.0
    rng = np.random.default_rng(seed)
    means = diff[rng.integers(0, len(diff), size=(n, len(diff)))].mean(axis=1)
    return float(diff.mean()), float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


@dataclass(frozen=True)
class Decision:
    """What `polaris tune` found: the cross-validated figures, the weights fitted on every
    question, and whether to keep them (``reason`` says why or why not)."""

    questions: int
    before: float
    after: float
    gain: float
    low: float
    high: float
    hit1_before: float
    hit1_after: float
    weights: dict[str, float]
    keep: bool
    reason: str


MIN_QUESTIONS = 10


def decide(samples: Sequence[Sample], k: int = FOLDS, seed: int = SEED, ridge: float = RIDGE) -> Decision:
    """Cross-validate, bootstrap the paired gain, fit on everything; keep only a gain whose
    whole 95% interval is above 0."""
    cv = cross_validate(samples, k, seed, ridge)
    gain, low, high = paired_interval(cv["after"] - cv["before"], seed=seed)
    w = fit(samples, ridge)
    weights = {n: round(float(v), 6) for n, v in zip(learned.NAMES, w) if round(float(v), 6) != 0}
    learnable = sum(1 for s in samples if (s.grades > 0).any())
    if learnable < MIN_QUESTIONS:
        keep, reason = False, (f"only {learnable} labelled question(s) have a relevant section among the candidates;"
                               f" at least {MIN_QUESTIONS} are needed to fit and check the weights")
    elif low > 0:
        keep, reason = True, f"the cross-validated gain {gain:+.4f} has a 95% interval above 0 ({low:+.4f} to {high:+.4f})"
    else:
        keep, reason = False, (f"the cross-validated gain {gain:+.4f} is within the noise: its 95% interval"
                               f" ({low:+.4f} to {high:+.4f}) is not above 0")
    mean = lambda a: float(a.mean()) if len(a) else 0.0  # noqa: E731
    return Decision(len(samples), mean(cv["before"]), mean(cv["after"]), gain, low, high,
                    mean(cv["hit1_before"]), mean(cv["hit1_after"]), weights, keep, reason)


def weights_table(weights: Mapping[str, float]) -> str:
    """A ``[fusion_weights]`` TOML table (features in ``learned.NAMES`` order)."""
    lines = ["[fusion_weights]  # written by `polaris tune`; remove the table for the fixed fusion"]
    lines += [f"{n} = {weights[n]!r}" for n in learned.NAMES if n in weights]
    return "\n".join(lines) + "\n"
