"""Ending the helper threads of ``in_parts`` that a test made (NOTE [ Batch parts ])."""

from __future__ import annotations

from memgrad.ops import parts as parts_mod


def stop_helpers() -> None:
    """Stop the helper threads in ``Parts.helpers`` (each ends once its part is done)."""
    for h in parts_mod.Parts.helpers or ():
        h.stop()
