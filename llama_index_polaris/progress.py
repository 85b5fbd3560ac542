"""The progress bar of an indexing run, for the doors (the engine only reports progress):
files done, with chunks embedded and chunks per second, on ``tqdm.auto`` (the notebook's
own widget in Jupyter, text on a terminal).

`polaris index` shows it on a terminal; from Python or a notebook::

    with IndexProgress() as bar:
        report = index.index_paths(["docs"], progress=bar.update)
"""

from __future__ import annotations

import time
from typing import Any


class IndexProgress:
    """``update(stage, done, total)`` is the indexer's ``progress`` callback; ``close()`` ends the bar
    (the next ``update`` starts a new one: `polaris index --watch` draws one per batch). The bar
    appears once the run has lasted ``delay`` seconds; ``write`` prints a line above it."""

    def __init__(self, enabled: bool = True, file: Any = None, leave: bool = True, delay: float = 0) -> None:
        self.enabled, self.file, self.leave, self.delay = enabled, file, leave, delay
        self.bar: Any = None
        self.started = 0.0

    def update(self, stage: str, done: int, total: int) -> None:
        """One step of the run: ``documents`` (files done of ``total``) or ``chunks`` (embedded so far)."""
        if not self.enabled:
            return
        if self.bar is None:
            from tqdm.auto import tqdm

            self.started = time.perf_counter()
            self.bar = tqdm(total=total, unit="file", desc="indexing", leave=self.leave, file=self.file,
                            delay=self.delay)
        if stage == "documents":
            self.bar.total = max(total, self.bar.total or 0)
            self.bar.update(done - self.bar.n)
        else:
            elapsed = time.perf_counter() - self.started
            self.bar.set_postfix_str(f"{done} chunks embedded, {done / max(elapsed, 1e-9):.1f} chunks/s",
                                     refresh=elapsed >= self.delay)  # not drawn before the delay

    def write(self, line: str, file: Any = None) -> None:
        """``line`` printed (and flushed) to ``file`` (stdout by default), above the bar while one is shown."""
        import sys

        file = file if file is not None else sys.stdout
        if self.bar is None or time.perf_counter() - self.started < self.delay:  # no bar on screen yet
            print(line, file=file, flush=True)
            return
        from tqdm.auto import tqdm

        tqdm.write(line, file=file)
        file.flush()

    def close(self) -> None:
        """End the bar (it stays shown when ``leave``)."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def __enter__(self) -> "IndexProgress":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
