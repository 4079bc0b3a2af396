"""Selective checkpointing: which op outputs a checkpointed region keeps.

A policy is a predicate over a primitive record (``memgrad.ops.REGISTRY`` entries): True
keeps that op's outputs from the forward pass (backward uses them as they are, and the
recomputation takes them instead of running the op again), False recomputes them. A policy
changes memory and recompute work, never the gradients.

Example:
    >>> import memgrad as mg
    >>> from memgrad.checkpoint import policy
    >>> keep = policy.save_any(policy.save_matmuls, policy.save_only("softmax"))
    >>> keep(mg.ops.REGISTRY["matmul"]), keep(mg.ops.REGISTRY["exp"])
    (True, False)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = [
    "Policy",
    "save_all",
    "save_none",
    "save_matmuls",
    "save_only",
    "save_any",
    "save_all_of",
    "negate",
]

Policy = Callable[[Any], bool]

# kinds of primitives whose outputs are expensive to recompute
_MATMUL_KINDS = frozenset({"matmul", "conv"})


def save_all(prim: Any) -> bool:
    """Keep every op output: the region costs as much memory as without checkpointing and
    recomputes nothing."""
    return True


def save_none(prim: Any) -> bool:
    """Keep nothing: recompute the whole region in backward (the default)."""
    return False


def save_matmuls(prim: Any) -> bool:
    """Keep the outputs of matmul, linear and conv ops; recompute the cheap elementwise ones
    from them."""
    return prim.kind in _MATMUL_KINDS


def save_only(*names: str) -> Policy:
    """Keep the outputs of the named primitives only.

    Example:
        >>> from memgrad.checkpoint.policy import save_only
        >>> import memgrad as mg
        >>> save_only("tanh")(mg.ops.REGISTRY["tanh"])
        True
    """
    from memgrad.ops import REGISTRY

    unknown = [n for n in names if n not in REGISTRY]
    if unknown:
        raise ValueError(
            f"save_only: unknown primitive names {unknown}; the names are the keys of "
            f"memgrad.ops.REGISTRY, e.g. {sorted(REGISTRY)[:6]}"
        )
    chosen = frozenset(names)

    def policy(prim: Any) -> bool:
        return prim.name in chosen

    policy.__name__ = f"save_only{tuple(sorted(chosen))}"
    return policy


def save_any(*policies: Policy) -> Policy:
    """Keep an output when any of ``policies`` keeps it."""

    def policy(prim: Any) -> bool:
        return any(p(prim) for p in policies)

    return policy


def save_all_of(*policies: Policy) -> Policy:
    """Keep an output only when every one of ``policies`` keeps it."""

    def policy(prim: Any) -> bool:
        return all(p(prim) for p in policies)

    return policy


def negate(p: Policy) -> Policy:
    """Keep exactly what ``p`` recomputes."""

    def policy(prim: Any) -> bool:
        return not p(prim)

    return policy
