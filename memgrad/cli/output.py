"""Printing for the command line: the one-line error the commands exit with, the rich
console, and the pictures ``memgrad tune`` draws (matplotlib, the optional extra ``plot``).

Example:
    >>> CliError("unknown model 'x'").exit_status
    2
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from memgrad.memory import TimelineEntry

__all__ = [
    "CliError",
    "first_line",
    "console",
    "require_matplotlib",
    "check_writable",
    "Point",
    "Curve",
    "plot_tradeoff",
    "plot_timelines",
]

MB = 1e6


class CliError(Exception):
    """A problem with what the user asked for. ``main`` prints it as one line,
    ``memgrad <command>: error: <message>``, and exits with status 2 (no traceback)."""

    exit_status = 2


def first_line(e: BaseException) -> str:
    """The first line of an exception's message, for a one-line error about it.

    Example:
        >>> first_line(ValueError("bad shape" + chr(10) + "more detail"))
        'bad shape'
    """
    lines = str(e).strip().splitlines()
    return lines[0] if lines else "(no message)"


def console() -> Console:
    """The rich console the commands print through (wide enough for their tables when the
    output is not a terminal). Markup and emoji codes are off: what the user wrote (a model
    ``pkg.smile:factory``, a path with ``[brackets]``) prints as written, so the commands
    style text with ``style=`` or ``rich.text.Text``, never with markup in a string.

    Example:
        >>> console().print("x:smile: [bold]y")
        x:smile: [bold]y
    """
    plain = dict(highlight=False, markup=False, emoji=False)
    c = Console(**plain)
    if not c.is_terminal:
        c = Console(**plain, width=max(c.width, 120))
    return c


def require_matplotlib(option: str) -> Any:
    """``matplotlib.pyplot`` with the non-interactive Agg backend, or a ``CliError`` that says
    how to install it.

    Example:
        >>> plt = require_matplotlib("--plot")  # doctest: +SKIP
    """
    try:
        import matplotlib
    except ImportError:
        raise CliError(
            f'{option} needs matplotlib, which is not installed; run: pip install "memgrad[plot]"'
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def check_writable(path: str, option: str, suffix: str = "") -> Path:
    """The path that will be written (``path``, with ``suffix`` added when it does not end
    with it, as ``numpy.savez`` adds ``.npz``), after checking that it can be: its directory
    exists and takes new files, and it is not a directory nor a file that cannot be written.
    So a long run does not fail at the end.

    Raises:
        CliError: naming the option, the path, what is wrong and the fix.

    Example:
        >>> check_writable("out", "--save", ".npz").name
        'out.npz'
    """
    p = Path(path)
    if p.is_dir():
        raise CliError(f"{option} {path}: is a directory; give a file name")
    if suffix and p.suffix != suffix:
        p = p.with_name(p.name + suffix)
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.exists():
        raise CliError(f"{option} {path}: the directory {str(parent)!r} does not exist; "
                       "create it or choose another path")
    if not parent.is_dir():
        raise CliError(f"{option} {path}: {str(parent)!r} is a file, not a directory; "
                       "choose another path")
    if p.is_dir():
        raise CliError(f"{option} {path}: {str(p)!r}, where it would be written, is a "
                       "directory; give another file name")
    try:
        if p.exists():
            with open(p, "ab"):  # appends nothing: the file stays as it is
                pass
        else:
            with tempfile.TemporaryFile(dir=parent):
                pass
    except OSError as e:
        where = (f"cannot write to {str(p)!r}" if p.exists()
                 else f"cannot create files in the directory {str(parent)!r}")
        raise CliError(f"{option} {path}: {where} ({e.strerror or e}); choose a path you can "
                       "write to, or change its permissions") from None
    return p


@dataclass
class Point:
    """One configuration on the trade-off picture."""

    label: str
    seconds: float
    peak: int
    highlight: bool = False


@dataclass
class Curve:
    """Bytes alive over one step, for the timeline picture."""

    label: str
    timeline: Sequence[TimelineEntry]
    start_bytes: int = 0


def _budget_lines(ax: Any, budgets: Sequence[tuple[str, int]]) -> None:
    for label, nbytes in budgets:
        ax.axhline(nbytes / MB, color="0.6", linestyle="--", linewidth=1)
        ax.annotate(f"budget {label}", (1.0, nbytes / MB), xycoords=("axes fraction", "data"),
                    xytext=(3, 0), textcoords="offset points", va="center", fontsize=8,
                    color="0.4", annotation_clip=False)


def _place_labels(fig: Any, ax: Any, points: Sequence[Point]) -> None:
    """Label each point at the first of a few offsets where the label overlaps no label
    placed before it and stays inside the axes."""
    renderer = fig.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    placed: list[Any] = []
    offsets = [(6, 5, "left"), (6, -12, "left"), (-6, 5, "right"), (-6, -12, "right"),
               (6, 16, "left"), (-6, 16, "right"), (6, -23, "left"), (-6, -23, "right")]
    for p in sorted(points, key=lambda p: (not p.highlight, p.seconds)):
        text = p.label + (" (recommended)" if p.highlight else "")
        for dx, dy, ha in offsets:
            label = ax.annotate(text, (p.seconds * 1e3, p.peak / MB), xytext=(dx, dy),
                                textcoords="offset points", ha=ha, fontsize=8,
                                fontweight="bold" if p.highlight else "normal")
            box = label.get_window_extent(renderer)
            inside = frame.x0 <= box.x0 and box.x1 <= frame.x1
            if inside and not any(box.overlaps(other) for other in placed):
                break
            if (dx, dy, ha) != offsets[-1]:
                label.remove()
        placed.append(box)


def plot_tradeoff(
    path: Path, panels: Sequence[tuple[str, Sequence[Point], Sequence[tuple[str, int]]]],
    frontiers: Sequence[Sequence[tuple[int, float]]] = (),
    predicted: Sequence[Sequence[tuple[int, float]]] = (),
) -> None:
    """Draw peak memory against step time, one labelled point per configuration and one
    panel per model, with the budgets as dashed lines, and save it as a PNG.

    Args:
        path: the file to write.
        panels: ``(title, points, budgets)`` per model; ``budgets`` are ``(label, bytes)``.
        frontiers: per panel, measured ``(peak bytes, seconds)`` of plans over many
            budgets, drawn as a line (the planner's memory/time frontier).
        predicted: per panel, the predicted ``(budget bytes, seconds)`` frontier, dashed.

    Example:
        >>> plot_tradeoff(Path("tradeoff.png"), [("mlp", [Point("plain", 0.01, 10**6)], [])])
        ... # doctest: +SKIP
    """
    plt = require_matplotlib("--plot")
    fig, axes = plt.subplots(
        1, len(panels), figsize=(6.4 * len(panels), 4.8), squeeze=False, layout="constrained"
    )
    for i, (ax, (title, points, budgets)) in enumerate(zip(axes[0], panels)):
        _budget_lines(ax, budgets)
        line = sorted(frontiers[i]) if i < len(frontiers) else []
        if line:
            ax.plot([t * 1e3 for _, t in line], [b / MB for b, _ in line], "-o", ms=3,
                    color="tab:orange", zorder=2, label="graph plans, measured")
        guess = predicted[i] if i < len(predicted) else []
        if guess:
            ax.step([t * 1e3 for _, t in guess], [b / MB for b, _ in guess], "--",
                    where="post", color="tab:green", zorder=1, label="graph plans, predicted")
        if line or guess:
            ax.legend(loc="upper right", fontsize=8)
        for p in points:
            ax.scatter(p.seconds * 1e3, p.peak / MB, s=70 if p.highlight else 30,
                       color="tab:red" if p.highlight else "tab:blue", zorder=3,
                       edgecolor="black" if p.highlight else "none")
        ax.margins(x=0.15, y=0.1)
        ax.set_ylim(bottom=0)
        ax.set_title(title)
        ax.set_xlabel("step time (ms, forward + loss + backward)")
        ax.set_ylabel("peak memory above the step's start (MB)")
        ax.grid(True, alpha=0.3)
    fig.canvas.draw()  # lay the panels out, so that the labels can be placed in pixels
    for ax, (_, points, _) in zip(axes[0], panels):
        _place_labels(fig, ax, points)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_timelines(
    path: Path, panels: Sequence[tuple[str, Sequence[Curve], Sequence[tuple[str, int]]]]
) -> None:
    """Draw bytes alive after each op of one step, one line per run and one panel per model,
    with the phases (forward, recompute, backward) marked, and save it as a PNG.

    Args:
        path: the file to write.
        panels: ``(title, curves, budgets)`` per model; ``budgets`` are ``(label, bytes)``.

    Example:
        >>> plot_timelines(Path("timeline.png"), [("mlp", [], [])])  # doctest: +SKIP
    """
    plt = require_matplotlib("--timeline")
    fig, axes = plt.subplots(
        1, len(panels), figsize=(6.4 * len(panels), 5.4), squeeze=False, layout="constrained"
    )
    for ax, (title, curves, budgets) in zip(axes[0], panels):
        _budget_lines(ax, budgets)
        starts: set[int] = set()  # where backward begins: one line where runs agree
        for i, curve in enumerate(curves):
            color = f"C{i}"
            ys = [(e.bytes - curve.start_bytes) / MB for e in curve.timeline]
            ax.plot(range(len(ys)), ys, color=color, linewidth=1.2, label=curve.label)
            backward = next((k for k, e in enumerate(curve.timeline) if e.phase == "backward"),
                            None)
            if backward is not None and backward not in starts:
                starts.add(backward)
                ax.axvline(backward, color=color, linestyle=":", linewidth=1,
                           label="backward starts")
            recompute = [k for k, e in enumerate(curve.timeline) if e.phase == "recompute"]
            if recompute:
                ax.scatter(recompute, [ys[k] for k in recompute], s=8, color=color,
                           marker="x", label=f"{curve.label}: recompute ops")
        ax.set_title(title)
        ax.set_xlabel("op number within one training step (forward, then backward)")
        ax.set_ylabel("bytes alive above the step's start (MB)")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2,
                  frameon=False)
    fig.savefig(path, dpi=120)
    plt.close(fig)
