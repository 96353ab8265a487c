"""Rows of a row-wise function, computed on first read.

A verdict reads a block's distributions only up to its first rejection (and the one row after it), so a rule that
walks the block in order need not pay for the rows it never reaches. ``LazyRows`` computes ``fn`` of a row of its
source when that row is first read (with the next few, as many as the CPU has threads) and keeps it; ``all()``
computes every row at once for the rules that read the whole block.

``fn`` must be row-wise: ``fn(source)[i]`` equals ``fn(source[i])``. torch's softmax, top-k, sort and cumulative
sum are computed row by row on CPU, so a row read alone equals the same row of the batched result bit for bit
(``tests/test_conformance.py`` checks it for the processed distributions).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

MAX_CPU_CHUNK = 4  # rows computed together on CPU: a row-wise kernel runs a row per thread


def row_chunk(device: torch.device, n: int) -> int:
    """How many rows to compute at once: on CPU one per intra-op thread (torch's row-wise kernels — softmax,
    top-k, sort — split rows across threads, not a row across threads, so as many rows as threads cost about one
    row's time), at most ``MAX_CPU_CHUNK``; on an accelerator every row in one launch."""
    if device.type != "cpu":
        return max(1, n)
    return max(1, min(MAX_CPU_CHUNK, torch.get_num_threads()))


class LazyRows:
    """``fn`` applied to the rows of ``source`` [n, V], each row at most once; indexable like a [n, V] tensor.

    A miss at row i computes rows i .. i + chunk − 1 in one call (``row_chunk``)."""

    def __init__(self, source: torch.Tensor, fn: Callable[[torch.Tensor], torch.Tensor], chunk: int = 1) -> None:
        self.source, self.fn, self.chunk = source, fn, max(1, chunk)
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
            if self.chunk == 1:
                row = self._rows[i] = self.fn(self.source[i])
            else:
                block = self.fn(self.source[i: i + self.chunk])
                for j in range(block.shape[0]):
                    self._rows.setdefault(i + j, block[j])
                row = self._rows[i]
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
