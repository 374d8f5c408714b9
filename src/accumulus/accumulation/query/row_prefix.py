"""A kept accumulation chunk's weighted prefix sums along its rows, so that a box's rows
cost two of them instead of all.

A series over a box reads, at each longitude edge of the box, the entries of every latitude
row it covers (the sums keep latitude as rows: their weights vary along it) and weighs and
adds them: a matrix-vector product over ``days x rows`` values, bound by memory traffic
(docs/benchmarks.md, session lead58). Kept decoded by the service, a chunk can instead be kept
as ``form[k] = Σ_{r<k} w_r · chunk[r]`` along that axis (``form[0] = 0``): the weighted sum
over rows ``lo..hi-1`` is then ``form[hi] − form[lo]``, two rows read whatever the box's
height. The form is made once per chunk version and weights, and kept in the chunk's place
(``chunk_reader.Derivation``, ``decoded_chunks``).

Its rounding differs from the product's by a few ulps of the rows' running sum. Counts (an
integer array) take float64 forms, four times their bytes for uint16 counts. A count a missing
chunk holds (its fill value: the type's largest for an unsigned type, -1 for a signed one)
is NaN in the form, so that a sum over it is not a number and the query, reading the
chunk again as it is stored, names it (``execute._checked_entries``)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True, slots=True)
class RowPrefix:
    """The prefix sums of a chunk's values times ``weights`` along ``axis``, that axis first
    (``chunk_reader.Derivation``)."""

    axis: int  # of the chunk
    # The weights of the chunk's rows along ``axis`` from its first (float64, 1-D); rows a
    # chunk declares past the array's end weigh 0.
    weights: np.ndarray
    dtype: np.dtype = field(default=np.dtype("f8"))
    # Names the form by its axis and weights: the same name, the same values.
    form: str = field(init=False)

    def __post_init__(self) -> None:
        digest = hashlib.blake2b(self.weights.tobytes(), digest_size=8).hexdigest()
        object.__setattr__(self, "form", f"rows{self.axis}-{digest}")

    def shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        rest = shape[: self.axis] + shape[self.axis + 1 :]
        return (shape[self.axis] + 1, *rest)

    def __call__(self, values: np.ndarray) -> np.ndarray:
        moved = np.moveaxis(values, self.axis, 0)
        if moved.dtype.kind in "iu":
            moved = _counts(moved)
        rows = moved.shape[0]
        weights = np.zeros(rows)
        held = min(rows, len(self.weights))
        weights[:held] = self.weights[:held]
        form = np.empty((rows + 1, *moved.shape[1:]))
        form[0] = 0.0
        np.multiply(moved, weights.reshape(rows, *(1,) * (moved.ndim - 1)), out=form[1:])
        np.cumsum(form[1:], axis=0, out=form[1:])
        return form


def _counts(values: np.ndarray) -> np.ndarray:
    """Integer counts as float64, their fill value (a missing chunk's) NaN."""
    unsigned = values.dtype.kind == "u"
    fill = values == np.iinfo(values.dtype).max if unsigned else values < 0
    return np.where(fill, np.nan, values.astype("f8"))


def row_sums(form: np.ndarray, local: tuple[slice | int, ...], axis: int) -> np.ndarray:
    """The weighted sums over ``local`` (a selection of the chunk, a slice of rows along
    ``axis``) taken along ``axis``, from the chunk's ``RowPrefix`` form: the selection's
    other axes, in their order."""
    rows = local[axis]
    assert isinstance(rows, slice) and rows.step in (None, 1)
    lo, hi, _ = rows.indices(len(form) - 1)
    rest = local[:axis] + local[axis + 1 :]
    # (One selection of each row: ``form[hi][rest]`` made a view of the whole row first.)
    result: np.ndarray = np.subtract(form[(hi, *rest)], form[(lo, *rest)])
    return result
