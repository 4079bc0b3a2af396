"""saved_report lists what backward needs, where it was saved, and per-region totals."""

import memgrad as mg
from memgrad.checkpoint import checkpoint


def test_report_lists_saved_tensors_with_ops_sources_and_sizes():
    w = mg.ones(8, 6, requires_grad=True)  # float32

    def model(x):
        h = (x @ w).tanh()  # matmul saves x (w is the only input needing grad); tanh its output
        return h.sum()

    report = mg.memory.saved_report(model, mg.ones(4, 8))
    assert [(e.op, e.shape, e.bytes, e.kept) for e in report.entries] == [
        ("matmul", (4, 8), 4 * 8 * 4, True),
        ("tanh", (4, 6), 4 * 6 * 4, True),
    ]
    assert all(e.source.endswith(f"test_report.py:{e.source.rsplit(':', 1)[1]}")
               for e in report.entries)
    line = int(report.entries[0].source.rsplit(":", 1)[1])
    assert "(x @ w).tanh()" in open(__file__).read().splitlines()[line - 1]
    assert report.kept_bytes == 128 + 96 and report.recomputed_bytes == 0
    assert w.grad is None  # nothing ran backward


def test_checkpoint_regions_get_their_own_totals():
    w = mg.ones(8, 8, requires_grad=True)

    def model(x):
        h = (x @ w).tanh()
        h = checkpoint(lambda z: (z @ w).relu() * 2.0, h)
        return (h * h).sum()

    report = mg.memory.saved_report(model, mg.ones(4, 8))
    regions = report.by_region()
    inside = [r for r in regions if r is not None]
    assert len(inside) == 1 and inside[0].startswith("checkpoint 1")
    # inside: its input (kept, it is the region's argument), w (a parameter), relu's output
    # (recomputed in backward)
    assert regions[inside[0]] == {"kept": 128 + 256, "recomputed": 128}
    # outside: x, tanh's output (the same buffer as the region's input), and h (the output of
    # the region, saved twice by the final product, counted once)
    assert regions[None] == {"kept": 128 + 128 + 128, "recomputed": 0}
    assert report.kept_bytes == 128 + 128 + 256 + 128
    text = str(report)
    assert "recomputed" in text and "total kept from forward to backward: 640 B" in text
