"""The op log of a checkpoint region: what its forward ran and read, for the recomputation
to be checked against (NOTE [ Recompute rules ] points 4 and 5 in checkpoint.py)."""

from __future__ import annotations

from typing import Any

import numpy as np

from memgrad.errors import CheckpointError
from memgrad.tensor import Tensor

__all__ = ["OpLog"]

class OpLog:
    """The ops a region ran in forward, for its recomputation to be checked against (NOTE
    [ Recompute rules ] points 4 and 5): each op's name and output type, and for each tensor
    it read from outside the region its version counter and version then."""

    def __init__(self, check_types: bool, debug: bool) -> None:
        self.check_types = check_types
        self.debug = debug
        self.ops: list[str] = []
        self.outputs: list[tuple] = []  # per op: (shape, dtype) of its output
        self.reads: dict[int, list[tuple]] = {}  # op -> [(argument position, vc, version)]
        self.params: dict[int, dict] = {}  # op -> its params, for ops with index arrays
        self._made: set[int] = set()  # ids of the outputs of the region's ops
        self.writes: list[tuple] = []  # in-place writes no op recorded: (name, reads, params)

    def forward_op(self, prim: Any, args: tuple, params: dict) -> int:
        """Log the reads of the op about to run; returns its number."""
        k = len(self.ops)
        self.ops.append(prim.name)
        if prim.array_params:
            self.params[k] = prim.own_params(params)
        made = self._made
        reads = None
        for pos, a in enumerate(args):
            if isinstance(a, Tensor) and id(a) not in made:
                vc = a._version_counter()
                if reads is None:
                    reads = self.reads[k] = []
                reads.append((pos, vc, vc.v))
        return k

    def forward_written(self, prim: Any, args: tuple, params: dict) -> None:
        """Log an in-place write that no op recorded (no gradient involved), in order: what
        it reads from outside the region and its index arrays, checked in the
        recomputation (``check_write``) as an op's are."""
        made = self._made
        reads = [(pos, a._version_counter(), a._version_counter().v)
                 for pos, a in enumerate(args) if isinstance(a, Tensor) and id(a) not in made]
        self.writes.append((prim.name, reads, prim.own_params(params)))

    def check_write(self, j: int, prim: Any, args: tuple, params: dict) -> None:
        """Before write ``j`` of a recomputation (direct, or recorded with a gradient): it
        reads what the forward pass's write ``j`` read."""
        if j >= len(self.writes):
            return  # more writes than the forward pass: the determinism check's business
        name, reads, logged = self.writes[j]
        for pos, vc, version in reads:
            a = args[pos] if pos < len(args) else None
            if isinstance(a, Tensor) and a._vc is vc and vc.v != version:
                raise CheckpointError(
                    f"memgrad.checkpoint: the in-place {name} of the checkpointed function "
                    f"reads a tensor of shape {a.shape} that was changed in place since the "
                    f"forward pass (version {version} -> {vc.v}), so recomputing would give "
                    "other activations than the forward pass did. Change it after backward, "
                    "or pass the function a copy (.clone())."
                )
        if prim.array_params and not _same_arrays(logged, params):
            raise CheckpointError(
                f"memgrad.checkpoint: the in-place {name} of the checkpointed function indexes "
                "with an index tensor that was changed in place since the forward pass, so "
                "recomputing would give other activations than the forward pass did. Change "
                "it after backward, or index with a copy (.clone())."
            )

    def forward_out(self, out: Tensor) -> None:
        self._made.add(id(out))
        self.outputs.append((out.shape, out.dtype))

    def forward_done(self) -> None:
        """The forward pass is over: forget the ids of its outputs (they may be reused)."""
        self._made = set()

    def check_params(self, k: int, params: dict) -> None:
        """Before op ``k`` of a recomputation: its index arrays (``x[idx]`` with an index
        tensor) hold what they held in the forward pass."""
        logged = self.params.get(k)
        if logged is not None and not _same_arrays(logged, params):
            raise CheckpointError(
                f"memgrad.checkpoint: op {k} ({self.ops[k]}) of the checkpointed function "
                "indexes with an index tensor that was changed in place since the forward "
                "pass, so recomputing would give other activations than the forward pass did. "
                "Change it after backward, or index with a copy (.clone())."
            )

    def check_reads(self, k: int, args: tuple) -> None:
        """Before op ``k`` of a recomputation: what it reads from outside is as it was."""
        for pos, vc, version in self.reads.get(k, ()):
            a = args[pos] if pos < len(args) else None
            if isinstance(a, Tensor) and a._vc is vc and vc.v != version:
                raise CheckpointError(
                    f"memgrad.checkpoint: op {k} ({self.ops[k]}) of the checkpointed function "
                    f"reads a tensor of shape {a.shape} that was changed in place since the "
                    f"forward pass (version {version} -> {vc.v}), so recomputing would give "
                    "other activations than the forward pass did. Change it after backward, "
                    "or pass the function a copy (.clone())."
                )

    def mismatch(self, what: str, run_ops: list[str]) -> CheckpointError:
        text = (
            f"memgrad.checkpoint: {what}. The checkpointed function must compute the same "
            "ops on tensors of the same shapes when it is recomputed (no data-dependent "
            "control flow on values that change, no state changed between the two runs)."
        )
        if self.debug:
            text += (
                " You are seeing this error because you passed `debug=True` to checkpoint "
                "(or set_checkpoint_debug_enabled(True)).\nOperations executed during the "
                f"original forward:\n  {self.ops}\nOperations executed during "
                f"recomputation:\n  {run_ops}"
            )
        else:
            text += (" Pass debug=True (or use set_checkpoint_debug_enabled(True)) to see the "
                     "op sequences of both runs.")
        return CheckpointError(text)


def _same_arrays(a: Any, b: Any) -> bool:
    """Whether the arrays in params ``a`` and ``b`` are equal, where both have one at the
    same place (other differences are the determinism check's business)."""
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return a.shape != b.shape or np.array_equal(a, b)
    if isinstance(a, dict) and isinstance(b, dict):
        return all(_same_arrays(a[key], b[key]) for key in a.keys() & b.keys())
    if isinstance(a, tuple) and isinstance(b, tuple):
        return all(_same_arrays(x, y) for x, y in zip(a, b))
    return True
