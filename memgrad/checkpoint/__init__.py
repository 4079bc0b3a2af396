"""Activation checkpointing: trade recomputation for memory with the same gradients."""

from memgrad.checkpoint import policy
from memgrad.checkpoint.checkpoint import checkpoint, is_recomputing
from memgrad.checkpoint.planner import Plan, StageProfile, plan, plan_from_profile, predict, profile
from memgrad.checkpoint.sequential import (
    CheckpointedSequential,
    checkpoint_sequential,
    segment_bounds,
)

__all__ = [
    "checkpoint",
    "checkpoint_sequential",
    "CheckpointedSequential",
    "segment_bounds",
    "is_recomputing",
    "policy",
    "plan",
    "plan_from_profile",
    "predict",
    "profile",
    "Plan",
    "StageProfile",
]
