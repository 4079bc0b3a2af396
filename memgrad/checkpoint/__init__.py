"""Activation checkpointing: trade recomputation for memory with the same gradients."""

from memgrad.checkpoint import policy
from memgrad.checkpoint.checkpoint import checkpoint, is_recomputing
from memgrad.checkpoint.graph_plan import Plan, PlanRow
from memgrad.checkpoint.graph_runtime import PlanHandle
from memgrad.checkpoint.planner import (
    SegmentPlan,
    StageProfile,
    plan,
    plan_from_profile,
    plan_segments,
    predict,
    profile,
)
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
    "plan_segments",
    "plan_from_profile",
    "predict",
    "profile",
    "Plan",
    "PlanRow",
    "PlanHandle",
    "SegmentPlan",
    "StageProfile",
]
