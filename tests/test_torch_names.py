"""docs/coming-from-pytorch.md's table of missing PyTorch names is what tools/torch_names.py
makes from memgrad's namespaces now: a name added to memgrad without rerunning it fails here."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import torch_names  # noqa: E402


def test_the_page_table_is_current():
    assert torch_names.main(["--check"]) == 0, "run python tools/torch_names.py"


def test_present_renamed_and_absent_names_are_told_apart():
    rows = [
        ("torch", "memgrad", "tanh zeros no_such_name_in_memgrad"),
        ("torch.Tensor", "memgrad.Tensor", "backward view no_such_method"),
        ("torch.distributed", "memgrad.distributed", "get_rank all_reduce"),  # rank: renamed
        ("torch.nn.nothing", "memgrad.nn.nothing_here", "Thing"),
    ]
    assert torch_names.missing(rows) == [
        ("torch", "memgrad", ["no_such_name_in_memgrad"]),
        ("torch.Tensor", "memgrad.Tensor", ["no_such_method"]),
        ("torch.distributed", "memgrad.distributed", []),
        ("torch.nn.nothing", "memgrad.nn.nothing_here", ["Thing"]),
    ]
    text = torch_names.table(rows)
    assert text.startswith("Of 9 names common in PyTorch code, memgrad has 6")
    missing_part, renamed_part = text.split("another name")
    assert "| `torch.nn.nothing` | `memgrad.nn.nothing_here` (no such module yet) | `Thing` |" \
        in missing_part
    assert "| `torch.distributed` |" not in missing_part  # nothing missing there
    assert renamed_part.count("| `torch.") == 1  # only get_rank's row
    assert "| `torch.distributed.get_rank` | `memgrad.distributed.rank` |" in renamed_part


def test_a_stale_table_is_replaced_between_the_markers_only():
    page = f"intro\n{torch_names.BEGIN}\nold table\n{torch_names.END}\nafter\n"
    assert torch_names.render(page, "new\n") == (
        f"intro\n{torch_names.BEGIN}\nnew\n{torch_names.END}\nafter\n")
    with pytest.raises(SystemExit, match="torch-names: begin"):
        torch_names.render("a page without markers\n", "new\n")


def test_every_renamed_name_is_listed_and_exists_in_memgrad():
    listed = {f"{t}.{n}" for t, _, names in torch_names.COMMON for n in names.split()}
    for theirs, ours in torch_names.RENAMED.items():
        assert theirs in listed, theirs
        torch_path, _, name = theirs.rpartition(".")
        target = next(o for t, o, _ in torch_names.COMMON if t == torch_path)
        assert torch_names.has(torch_names.namespace(target), torch_path, name), (theirs, ours)
