"""tools/check_reference.py: which public modules and names a built API reference lacks."""

import sys
from pathlib import Path

import memgrad as mg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import check_reference  # noqa: E402


def test_public_modules_follow_all_from_memgrad():
    modules = check_reference.public_modules()
    for name in ("memgrad", "memgrad.nn", "memgrad.nn.functional", "memgrad.checkpoint.policy",
                 "memgrad.autograd.graph", "memgrad.optim", "memgrad.jit"):
        assert name in modules, name
    assert "memgrad.cli" not in modules and "memgrad._kernels" not in modules


def test_missing_names_a_module_without_a_page_and_an_undocumented_name():
    modules = {"memgrad.optim": mg.optim}
    everything = {"memgrad.optim"} | {f"memgrad.optim.{n}" for n in mg.optim.__all__}
    assert check_reference.missing(everything, modules) == []
    found = check_reference.missing(everything - {"memgrad.optim", "memgrad.optim.SGD"}, modules)
    assert len(found) == 2
    assert found[0].startswith("memgrad.optim.SGD: not in the reference")
    assert found[1].startswith("module memgrad.optim: add a page with '::: memgrad.optim'")


def test_a_name_documented_under_another_public_path_or_where_it_is_defined_counts():
    modules = {"memgrad": mg, "memgrad.ops": mg.ops, "memgrad.jit": mg.jit}
    paths = check_reference.paths_by_object(modules)
    assert {"memgrad.tanh", "memgrad.ops.tanh"} <= paths[id(mg.tanh)][1]
    assert "memgrad.jit.trace.trace" in paths[id(mg.jit.trace)][1]  # shadowed by its module


def test_without_a_built_site_it_says_how_to_build_one(tmp_path, capsys):
    assert check_reference.main([str(tmp_path)]) == 2
    assert "mkdocs build --strict" in capsys.readouterr().err
