"""Activation checkpointing: trade recomputation for memory with the same gradients."""

from memgrad.checkpoint import policy
from memgrad.checkpoint.checkpoint import (
    checkpoint,
    is_recomputing,
    set_checkpoint_debug_enabled,
    set_checkpoint_early_stop,
)
from memgrad.checkpoint.frame import GraphExecGroup
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
from memgrad.checkpoint.selective import (
    CheckpointPolicy,
    SelectiveCheckpointContext,
    create_selective_checkpoint_contexts,
)
from memgrad.checkpoint.sequential import (
    CheckpointedSequential,
    checkpoint_sequential,
    segment_bounds,
)
from memgrad.errors import CheckpointError

__all__ = [
    "checkpoint",
    "CheckpointError",
    "checkpoint_sequential",
    "CheckpointedSequential",
    "segment_bounds",
    "is_recomputing",
    "set_checkpoint_early_stop",
    "set_checkpoint_debug_enabled",
    "GraphExecGroup",
    "CheckpointPolicy",
    "SelectiveCheckpointContext",
    "create_selective_checkpoint_contexts",
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
