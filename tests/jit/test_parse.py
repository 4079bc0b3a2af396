"""memgrad.jit.parse: a parser of literals. Round trips of traced graphs (every primitive of
the op table), malformed texts (each error names its line and column), injection attempts
that must run nothing, the limits, and a mutation fuzz."""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import pkgutil
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numba.core.registry import CPUDispatcher

import memgrad as mg
import memgrad._kernels
from memgrad.jit.ir import format_literal
from tests.helpers.graph_texts import MUTATIONS, mutate, seed_cases, seed_graphs
from tests.helpers.op_samples import all_cases, nondiff_cases

parse_module = importlib.import_module("memgrad.jit.parse")  # mg.jit.parse is the function
THOROUGH = os.environ.get("MEMGRAD_THOROUGH") == "1"
ERROR = re.compile(r"^memgrad\.jit\.parse: line (\d+), column (\d+): ")


@contextlib.contextmanager
def no_kernels():
    """Every numba kernel of memgrad._kernels replaced by a function that fails, and the
    kernel ``parts.addmm`` keeps looked up again. Every module is imported before any kernel
    is replaced: a module whose import compiles code that calls kernels (the jobs of
    memgrad/_kernels/jobs.py) must see the real ones."""
    from memgrad.ops import parts

    saved = [(parts.Parts, "addmm", parts.Parts.addmm)]
    parts.Parts.addmm = False  # looked up again, from the replaced kernels
    modules = [importlib.import_module(f"memgrad._kernels.{info.name}")
               for info in pkgutil.iter_modules(memgrad._kernels.__path__)]
    try:
        for module in modules:
            for name, obj in list(vars(module).items()):
                if isinstance(obj, CPUDispatcher):

                    def ran(*args, _name=name, **kwargs):
                        raise AssertionError(f"the kernel {_name} ran while parsing")

                    saved.append((module, name, obj))
                    setattr(module, name, ran)
        yield
    finally:
        for module, name, obj in saved:
            setattr(module, name, obj)


def parse_error(text: str) -> tuple[int, int, str]:
    """The line, column and message of the TraceError that parsing ``text`` raises."""
    with pytest.raises(mg.TraceError) as info:
        mg.jit.parse(text)
    first = str(info.value).splitlines()[0]
    m = ERROR.match(first)
    assert m, first
    return int(m.group(1)), int(m.group(2)), first[m.end():]


@functools.cache
def seed_texts() -> tuple[str, ...]:
    return tuple(g.code for g in seed_graphs())


# ---------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("k", range(len(seed_cases())))
def test_traced_graphs_round_trip_and_rerun(k):
    fn, inputs = seed_cases()[k]
    g = mg.jit.trace(fn, *inputs)
    with no_kernels():
        parsed = mg.jit.parse(g.code)
    assert parsed == g
    assert parsed.code == g.code
    assert str(parsed) == str(g)
    parsed.bound.update(g.bound)
    want, got = g(*inputs), parsed(*inputs)
    for a, b in zip(want if g.tuple_output else (want,), got if g.tuple_output else (got,)):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_every_primitive_round_trips_without_running_a_kernel():
    # the traced types come from the real forwards; parse must find the same ones from the
    # text alone, with every kernel unavailable (NOTE [ Parse-time inference ])
    covered = set()
    for case in all_cases() + nondiff_cases():
        g = mg.jit.trace(case.fn, *case.inputs())
        with no_kernels():
            parsed = mg.jit.parse(g.code)
        assert parsed == g, case.id
        covered.update(b.op for b in g.bindings)
    assert covered == set(mg.ops.REGISTRY)


def test_numpy_scalar_arguments_keep_their_dtype():
    x = mg.tensor(np.ones(3, dtype=np.float16))
    g = mg.jit.trace(lambda x: (x * np.float32(2.0), x * 2.0, x + np.int8(-3)), x)
    assert "mul %x, float32(2.0)" in g.code and "add %x, int8(-3)" in g.code
    parsed = mg.jit.parse(g.code)
    assert parsed == g
    assert [v.dtype for v in parsed.outputs] == ["float32", "float16", "float16"]
    assert [type(b.args[1]) for b in parsed.bindings] == [np.float32, float, np.int8]


def test_parameters_with_numpy_values_round_trip():
    x = mg.ones(4, 3)
    g = mg.jit.trace(lambda x: (x[np.int64(1):np.int64(3)], x.to(np.float64)), x)
    assert "slice(1, 3, None)" in g.code and "to[dtype=float64]" in g.code
    assert mg.jit.parse(g.code) == g


def literal_values(leaves=None):
    """Values format_literal prints: scalars, strings, slices, dtypes, arrays, containers."""
    floats = st.floats(allow_nan=True, allow_infinity=True)
    scalars = st.one_of(
        st.integers(-(2**63), 2**63), floats, st.booleans(), st.none(), st.just(Ellipsis),
        st.text(max_size=8),
        st.builds(slice, st.integers(-5, 5) | st.none(), st.integers(-5, 5) | st.none(),
                  st.sampled_from([None, 1, -1, 2])),
        st.sampled_from(sorted(mg.jit.shapes.DTYPES)).map(np.dtype),
        st.builds(np.array, st.lists(st.integers(-(2**31), 2**31), min_size=1, max_size=5)),
        st.builds(np.array, st.lists(st.lists(st.booleans(), min_size=2, max_size=2),
                                     min_size=1, max_size=3)),
        st.builds(np.array, st.lists(floats, min_size=1, max_size=3)),
    )
    return st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                        | st.lists(inner, max_size=3).map(tuple), max_leaves=12)


@settings(max_examples=300 if THOROUGH else 100, deadline=None)
@given(literal_values())
def test_every_printed_literal_reads_back(value):
    text = format_literal(value)
    parser = parse_module._Parser(text)
    back = parser.literal_top()
    assert parser.peek().kind == "end"
    assert format_literal(back) == text
    assert type(back) is type(value)


# ---------------------------------------------------------------------------- malformed


GRAPH = "graph(%x: float32[2, 3]):\n  {body}\n  return %0\n"

MALFORMED = [
    ("", 1, 1, "expected 'graph(' at the start of the text, got the end of the text"),
    ("grap(%x: float32[2]):\n", 1, 1, "expected 'graph(' at the start"),
    ("graph(%x: float32[2]\n  return %x\n", 2, 3, "expected ',' or ')', got 'return'"),
    ("graph(%x: complex64[2]):\n  return %x\n", 1, 11, "unknown dtype 'complex64'"),
    ("graph(%x: float32[2, -1]):\n  return %x\n", 1, 22, "expected a size"),
    ("graph(%x: float32[2.5]):\n  return %x\n", 1, 19, "a size is an integer >= 0, not 2.5"),
    ("graph(%x: float32[65536, 65536]):\n  return %x\n", 1, 11, "more than MAX_ELEMENTS"),
    ("graph(%x: float32[2] = [1.0, 2.0]):\n  return %x\n", 1, 22, "only a const has values"),
    ("graph(const %c: float32[2]):\n  return %c\n", 1, 27, "expected '=' and the values"),
    ("graph(const %c: float32[3] = [1.0, 2.0]):\n  return %c\n", 1, 30, "has 2 values"),
    ("graph(const %c: int64[2] = [1, 2.5]):\n  return %c\n", 1, 28,
     "int64 data must hold ints, got float64"),
    ("graph(const %c: uint8[1] = [300]):\n  return %c\n", 1, 28, "does not fit uint8"),
    ("graph(const %c: float32[2] = [[1.0], [2.0, 3.0]]):\n  return %c\n", 1, 30,
     "rectangular nested lists"),
    ("graph(const %c: float64[2] = b64:AAAA):\n  return %c\n", 1, 34,
     "the base64 data of %c has 4 characters; float64[2] takes 24"),
    ("graph(const %c: uint8[1] = b64:ABC=):\n  return %c\n", 1, 32, "holds 2 bytes"),
    ("graph(%x: float32[2], %x: float32[2]):\n  return %x\n", 1, 23,
     "%x is already defined (line 1)"),
    (GRAPH.format(body="%0 = frobnicate %x"), 2, 8, "unknown primitive 'frobnicate'"),
    (GRAPH.format(body="%0 = exp %y"), 2, 12, "value %y is used before it is defined"),
    (GRAPH.format(body="%x = exp %x"), 2, 3, "%x is already defined (line 1)"),
    (GRAPH.format(body="%0 = mul %x, 9**9**9"), 2, 17, "unexpected '*'"),
    (GRAPH.format(body="%0 = mul %x, " + "9" * 200), 2, 16, "a number of 200 digits"),
    (GRAPH.format(body="%0 = mul %x, 'abc"), 2, 16, "a string that does not end on its line"),
    (GRAPH.format(body="%0 = gelu[approximate='\\q'] %x"), 2, 26, "unknown escape '\\\\q'"),
    (GRAPH.format(body="%0 = mul %x, 2 3"), 2, 18, "expected the end of the line, got '3'"),
    (GRAPH.format(body="%0 = sum[dim=0, dim=1, keepdim=False] %x"), 2, 19,
     "the parameter dim is given twice"),
    (GRAPH.format(body="%0 = sum[dim=(0 1), keepdim=False] %x"), 2, 19, "expected ',' or ')'"),
    (GRAPH.format(body="%0 = sum[dim=[0,,1]] %x"), 2, 19, "expected a literal, got ','"),
    (GRAPH.format(body="%0 = sum[dim=foo] %x"), 2, 16, "unknown name 'foo'"),
    (GRAPH.format(body="%0 = sum[dim=" + "(" * 40 + "0" + ")" * 40 + "] %x"), 2, 47,
     "nested deeper than MAX_DEPTH=32"),
    (GRAPH.format(body="%0 = mul %x, [1, 2]"), 2, 8, "argument 1 is list [1, 2]"),
    (GRAPH.format(body="%0 = matmul %x, %x"), 2, 8,
     "matmul: shapes (2, 3) and (2, 3) are not aligned"),
    (GRAPH.format(body="%0 = reshape[shape=(4, 2)] %x"), 2, 8,
     "reshape: does not accept these arguments (ValueError: cannot reshape"),
    (GRAPH.format(body="%0 = to[dtype='U1000000'] %x"), 2, 8, "to: dtype must be one of"),
    (GRAPH.format(body="%0 = expand[shape=(1048576, 1048576)] %x"), 2, 8,
     "expand: shape=(1048576, 1048576) has more than 268435456 elements"),
    (GRAPH.format(body="%0 = getitem[index=(array([5], int64), ...)] %x"), 2, 8,
     "getitem: does not accept these arguments (IndexError: index 5 is out of bounds"),
    (GRAPH.format(body="%0 = getitem[index=(1.5,)] %x"), 2, 8, "an index holds float 1.5"),
    (GRAPH.format(body="%0 = exp %x\n  return %0\n  %1 = exp %0"), 4, 3,
     "nothing may follow the return line"),
    (GRAPH.format(body="}"), 2, 3, "'}' closes no checkpoint block"),
    (GRAPH.format(body="checkpoint a {\n  checkpoint b {"), 3, 3,
     "a checkpoint block inside the block a (line 2)"),
    (GRAPH.format(body="checkpoint a {\n  %0 = exp %x"), 4, 3,
     "return inside the checkpoint block a (line 2)"),
    (GRAPH.format(body="checkpoint a {\n  }\n  checkpoint a {"), 4, 14,
     "a second checkpoint block a"),
    ("graph(%x: float32[2]):\n  %0 = exp %x\n", 3, 1, "the text ends without a 'return' line"),
    ("graph(%x: float32[2], const %c: float32[] = 1.0):\n  return %c\n", 2, 10,
     "%c is a const; a graph returns values"),
    ("graph(%x: float32[2]):\n  return\n", 2, 9, "expected a value to return (%name)"),
]


@pytest.mark.parametrize("text, line, column, message", MALFORMED)
def test_malformed_text_names_line_and_column(text, line, column, message):
    got = parse_error(text)
    assert got[:2] == (line, column), got
    assert message in got[2], got


def test_error_shows_the_line_with_a_caret():
    with pytest.raises(mg.TraceError) as info:
        mg.jit.parse(GRAPH.format(body="%0 = mul %x, 9**9**9"))
    lines = str(info.value).splitlines()
    assert lines[1] == "      %0 = mul %x, 9**9**9"
    assert lines[2] == "    " + " " * 16 + "^"


def test_kernel_primitives_check_their_operands_before_anything_runs():
    # a kernel trusts its caller; parse checks what the public functions check, so these
    # (which would write or read out of bounds in a kernel) are clean errors
    cases = [
        ("%g: float32[3], %x: float32[4]", "softmax_backward[dim=0] %g, %x",
         "softmax_backward: g and y must have one shape"),
        ("%x: float32[4, 8], %w: float32[3]", "layer_norm[ndim=1, eps=1e-05] %x, %w, None",
         "layer_norm: weight must have shape (8,)"),
        ("%g: float32[2, 3]", "index_scatter[shape=(2, 3), index=(array([7, 1], int64), ...)] %g",
         "index_scatter: the index does not fit shape (2, 3)"),
        ("%g: float32[2, 5]", "index_scatter[shape=(2, 3), index=(array([0, 1], int64), ...)] %g",
         "index_scatter: g must have the shape (2, 3) the index picks"),
        ("%x: float32[3, 4], %t: int64[2]",
         "nll_loss[ignore_index=-100, label_smoothing=0.0] %x, %t",
         "nll_loss: target must be int64 of shape (3,)"),
        ("%g: float32[1, 1, 9, 9], %w: float32[1, 1, 3, 3]",
         "conv2d_input_grad[input_shape=(1, 1, 4, 4), stride=(1, 1), padding=(0, 0), "
         "dilation=(1, 1), groups=1] %g, %w",
         "conv2d_input_grad: g must have shape (1, 1, 2, 2)"),
        ("%x: float32[1, 1, 4, 4], %w: float32[1, 1, 3, 3]",
         "conv2d[stride=(1, 1), padding=(-2, 0), dilation=(1, 1), groups=1] %x, %w, None",
         "conv2d: padding must be at least 0"),
        ("%g: float32[1, 2, 2, 2], %i: int64[1, 2, 2, 2]",
         "max_pool2d_backward[input_shape=(1, 3, 4, 4)] %g, %i",
         "max_pool2d_backward: input_shape (1, 3, 4, 4) does not fit g"),
        ("%x: int64[4]", "gelu[approximate='none'] %x", "gelu: x must be float32 or float64"),
    ]
    for formals, body, message in cases:
        with no_kernels():
            _, _, got = parse_error(f"graph({formals}):\n  %0 = {body}\n  return %0\n")
        assert got.startswith(message), got


def test_const_values_never_reach_a_forward():
    # out-of-range indices in a const: inference uses zeros of its shape, so the text parses
    # (the values are the data of the graph, checked when it runs)
    text = (
        "graph(%w: float32[3, 2], const %c0: int64[2] = [7, -9]):\n"
        "  %0 = embedding[padding_idx=None] %c0, %w\n"
        "  return %0\n"
    )
    g = mg.jit.parse(text)
    assert g.outputs[0].type_str == "float32[2, 2]"
    np.testing.assert_array_equal(g.constants[0].data, [7, -9])


def test_parse_takes_a_str():
    with pytest.raises(TypeError, match="expected the text of a graph"):
        mg.jit.parse(b"graph():\n  return\n")


# ---------------------------------------------------------------------------- injection


def injections(sentinel: str) -> list[str]:
    cmd = f"touch {sentinel}"
    escape = (  # reaches os.system through object's subclasses, no builtins needed
        "[c for c in ().__class__.__base__.__subclasses__() if c.__name__ == '_wrap_close']"
        f"[0].__init__.__globals__['system']('{cmd}')"
    )
    calls = [
        f"__import__('os').system('{cmd}')",
        escape,
        f"exec('import os; os.system(\"{cmd}\")')",
    ]
    texts = []
    for call in calls:
        texts += [
            f"graph(%x: float32[2]):\n  %0 = mul %x, {call}\n  return %0\n",
            f"graph(%x: float32[2]):\n  %0 = sum[dim={call}, keepdim=False] %x\n  return %0\n",
            f"graph(%x: float32[2]):\n  %0 = getitem[index=(slice({call}, None, None),)] %x\n"
            "  return %0\n",
            f"graph(%x: float32[2]):\n  %0 = getitem[index=(array({call}, int64),)] %x\n"
            "  return %0\n",
            f"graph(const %c: float32[1] = {call}):\n  return %c\n",
            f"graph(const %c: float32[1] = [{call}]):\n  return %c\n",
            f"graph(%x: float32[{call}]):\n  return %x\n",
            f"graph(%x: float32[2]):\n  return %x, {call}\n",
            f"graph(%x: float32[2]):\n  %0 = to[dtype={call}] %x\n  return %0\n",
        ]
    return texts


def test_injected_code_raises_and_runs_nothing(tmp_path):
    sentinel = tmp_path / "ran"
    texts = injections(str(sentinel))
    for text in texts:
        with pytest.raises(mg.TraceError):
            mg.jit.parse(text)
        assert not sentinel.exists(), text


def test_huge_power_is_a_clean_error():
    # ** is not in the grammar: the scanner stops at the first '*' (evaluating 9**9**9
    # would take longer than the universe has)
    line, column, message = parse_error(GRAPH.format(body="%0 = mul %x, 9**9**9"))
    assert (line, column) == (2, 17) and "no arithmetic" in message
    _, _, message = parse_error(GRAPH.format(body="%0 = mul %x, " + "9" * 5000))
    assert "MAX_NUMBER_CHARS=100" in message


# ---------------------------------------------------------------------------- limits


def test_limits_are_module_constants(monkeypatch):
    text = GRAPH.format(body="%0 = exp %x\n  %1 = exp %0\n  %2 = add %0, %1").replace(
        "return %0", "return %2"
    )
    assert mg.jit.parse(text)
    monkeypatch.setattr(parse_module, "MAX_INFERRED_ELEMENTS", 12)
    assert parse_error(text)[:2] == (4, 8)
    monkeypatch.setattr(parse_module, "MAX_INFERRED_ELEMENTS", 1 << 32)
    monkeypatch.setattr(parse_module, "MAX_ELEMENTS", 5)
    assert "more than MAX_ELEMENTS=5" in parse_error(text)[2]
    monkeypatch.setattr(parse_module, "MAX_ELEMENTS", 1 << 28)
    monkeypatch.setattr(parse_module, "MAX_TOKENS", 20)
    assert "more than MAX_TOKENS=20 tokens" in parse_error(text)[2]
    monkeypatch.setattr(parse_module, "MAX_TOKENS", 1 << 25)
    monkeypatch.setattr(parse_module, "MAX_LITERAL_CHARS", 10)
    wide = GRAPH.format(body="%0 = sum[dim=(0, 1, 0, 1, 0, 1), keepdim=False] %x")
    line, column, message = parse_error(wide)
    assert (line, column) == (2, 26) and "MAX_LITERAL_CHARS=10" in message


def test_results_are_bounded_before_they_are_computed():
    # each would allocate a 2**30-element array if it ran: the bound refuses it first
    n = 1 << 15
    big = f"graph(%x: float32[{n}, 1], %y: float32[1, {n}]):\n  %0 = {{}}\n  return %0\n"
    column = f"array([{', '.join(['[0]'] * n)}], int64)"
    row = f"array([{', '.join(['0'] * n)}], int64)"
    for body, message in [
        ("matmul %x, %y", f"matmul: the result would have shape ({n}, {n}), more than"),
        ("mul %x, %y", f"mul: the result could have up to {n * n} elements"),
        (f"getitem[index=({column}, {row})] %x", f"getitem: the result could have up to {n * n}"),
    ]:
        assert parse_error(big.format(body))[2].startswith(message)


# ---------------------------------------------------------------------------- fuzz


EDITS = st.lists(
    st.tuples(st.sampled_from(MUTATIONS), st.integers(0, 10**6), st.integers(0, 10**6)),
    min_size=1,
    max_size=4,
)


@settings(
    max_examples=3000 if THOROUGH else 300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(st.integers(0, 4), EDITS)
def test_mutated_texts_parse_or_raise_trace_error(k, edits):
    text = mutate(seed_texts()[k], edits)
    try:
        with no_kernels():
            g = mg.jit.parse(text)
    except mg.TraceError as e:
        assert ERROR.match(str(e)), str(e)
        return
    assert isinstance(g, mg.jit.Graph)
    assert mg.jit.parse(g.code).code == g.code


def test_a_parameter_bound_to_a_tensor_of_another_type_is_refused_before_any_kernel_runs():
    w = mg.ones(3, 3, requires_grad=True)
    g = mg.jit.trace(lambda x: (x @ w).softmax(-1), mg.ones(2, 3))
    parsed = mg.jit.parse(g.code)
    parsed.bound[g.params[0].name] = mg.ones(5, 5)
    with pytest.raises(mg.TraceError,
                       match=r"declared float32\[3, 3\] but bound to float32\[5, 5\]"):
        parsed(mg.ones(2, 3))
