"""Rows of a row-wise function, computed on first read.

A verdict reads a block's distributions only up to its first rejection (and the one row after it), so a rule that
walks the block in order need not pay for the rows it never reaches. ``LazyRows`` computes ``fn`` of one row of its
source when that row is first read and keeps it; ``all()`` computes every row at once for the rules that read the
whole block.

``fn`` must be row-wise: ``fn(source)[i]`` equals ``fn(source[i])``. torch's softmax, top-k, sort and cumulative
sum are computed row by row on CPU, so a row read alone equals the same row of the batched result bit for bit
(``tests/test_conformance.py`` checks it for the processed distributions).
"""

from __future__ import annotations

from collections.abc import Callable

import torch


class LazyRows:
    """``fn`` applied to the rows of ``source`` [n, V], each row at most once; indexable like a [n, V] tensor."""

    def __init__(self, source: torch.Tensor, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        self.source, self.fn = source, fn
        self._rows: dict[int, torch.Tensor] = {}
        self._all: torch.Tensor | None = None

    def __len__(self) -> int:
        return int(self.source.shape[0])

    def __getitem__(self, i: int) -> torch.Tensor:
        if self._all is not None:
            return self._all[i]
        i = int(i) % len(self)
        row = self._rows.get(i)
        if row is None:
            row = self._rows[i] = self.fn(self.source[i])
        return row

    def all(self) -> torch.Tensor:
        """[n, V] every row (computed in one batched call unless every row was read already)."""
        if self._all is None:
            if len(self._rows) == len(self):
                self._all = torch.stack([self._rows[i] for i in range(len(self))])
            else:
                self._all = self.fn(self.source)
            self._rows.clear()
        return self._all

    @property
    def computed(self) -> int:
        """How many rows have been computed (all of them after ``all()``)."""
        return len(self) if self._all is not None else len(self._rows)
