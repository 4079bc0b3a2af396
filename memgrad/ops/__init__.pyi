# Made by tools/stubs.py from the op table; do not edit by hand.
from __future__ import annotations

from typing import Any

from memgrad.ops import conv as conv
from memgrad.ops import elementwise as elementwise
from memgrad.ops import indexing as indexing
from memgrad.ops import inplace as inplace
from memgrad.ops import linalg as linalg
from memgrad.ops import movement as movement
from memgrad.ops import nn as nn
from memgrad.ops import reduce as reduce
from memgrad.ops import registry as registry
from memgrad.ops.registry import REGISTRY as REGISTRY
from memgrad.ops.registry import Primitive as Primitive
from memgrad.tensor import Tensor

__all__ = [
    'abs', 'acos', 'add', 'addmm', 'all', 'allclose', 'amax', 'amin', 'any', 'argmax', 'argmin',
    'argsort', 'asin', 'atan', 'atan2', 'baddbmm', 'bernoulli', 'bmm', 'broadcast_to', 'cat',
    'ceil', 'chunk', 'clamp', 'clip', 'clone', 'concat', 'cos', 'cosh', 'cumprod', 'cumsum',
    'diag', 'div', 'dot', 'dropout', 'einsum', 'eq', 'equal', 'erf', 'exp', 'expand', 'expm1',
    'flatten', 'flip', 'floor', 'floor_divide', 'fmod', 'gather', 'ge', 'gt', 'hstack',
    'index_select', 'isfinite', 'isinf', 'isnan', 'le', 'lerp', 'log', 'log10', 'log1p', 'log2',
    'log_softmax', 'logical_and', 'logical_or', 'logical_xor', 'logsumexp', 'lt', 'masked_fill',
    'masked_select', 'matmul', 'max', 'maximum', 'mean', 'meshgrid', 'min', 'minimum', 'mm',
    'movedim', 'mul', 'multinomial', 'narrow', 'ne', 'neg', 'nonzero', 'norm', 'numel', 'outer',
    'permute', 'pow', 'prod', 'relu', 'remainder', 'repeat', 'repeat_interleave', 'reshape',
    'roll', 'round', 'rsqrt', 'scatter', 'scatter_add', 'sigmoid', 'sign', 'sin', 'sinh',
    'softmax', 'sort', 'split', 'sqrt', 'square', 'squeeze', 'stack', 'std', 'sub', 'sum', 't',
    'take_along_dim', 'tan', 'tanh', 'tile', 'topk', 'transpose', 'tril', 'triu', 'true_divide',
    'trunc', 'unbind', 'unflatten', 'unique', 'unsqueeze', 'var', 'view', 'vstack', 'where',
]

from memgrad.ops.arrange import argsort as argsort
from memgrad.ops.arrange import cumprod as cumprod
from memgrad.ops.arrange import cumsum as cumsum
from memgrad.ops.arrange import diag as diag
from memgrad.ops.arrange import flip as flip
from memgrad.ops.arrange import index_select as index_select
from memgrad.ops.arrange import masked_fill as masked_fill
from memgrad.ops.arrange import masked_select as masked_select
from memgrad.ops.arrange import meshgrid as meshgrid
from memgrad.ops.arrange import nonzero as nonzero
from memgrad.ops.arrange import prod as prod
from memgrad.ops.arrange import repeat as repeat
from memgrad.ops.arrange import repeat_interleave as repeat_interleave
from memgrad.ops.arrange import roll as roll
from memgrad.ops.arrange import scatter as scatter
from memgrad.ops.arrange import sort as sort
from memgrad.ops.arrange import tile as tile
from memgrad.ops.arrange import topk as topk
from memgrad.ops.arrange import tril as tril
from memgrad.ops.arrange import triu as triu
from memgrad.ops.arrange import unique as unique
from memgrad.ops.draws import bernoulli as bernoulli
from memgrad.ops.draws import multinomial as multinomial
from memgrad.ops.elementwise import abs as abs
from memgrad.ops.elementwise import clone as clone
from memgrad.ops.elementwise import exp as exp
from memgrad.ops.elementwise import log as log
from memgrad.ops.elementwise import neg as neg
from memgrad.ops.elementwise import relu as relu
from memgrad.ops.elementwise import sigmoid as sigmoid
from memgrad.ops.elementwise import sign as sign
from memgrad.ops.elementwise import sqrt as sqrt
from memgrad.ops.elementwise import tanh as tanh
from memgrad.ops.indexing import gather as gather
from memgrad.ops.indexing import max as max
from memgrad.ops.indexing import min as min
from memgrad.ops.indexing import scatter_add as scatter_add
from memgrad.ops.indexing import take_along_dim as take_along_dim
from memgrad.ops.linalg import addmm as addmm
from memgrad.ops.linalg import baddbmm as baddbmm
from memgrad.ops.linalg import bmm as bmm
from memgrad.ops.linalg import dot as dot
from memgrad.ops.linalg import einsum as einsum
from memgrad.ops.linalg import mm as mm
from memgrad.ops.linalg import norm as norm
from memgrad.ops.linalg import outer as outer
from memgrad.ops.movement import broadcast_to as broadcast_to
from memgrad.ops.movement import cat as cat
from memgrad.ops.movement import chunk as chunk
from memgrad.ops.movement import concat as concat
from memgrad.ops.movement import expand as expand
from memgrad.ops.movement import flatten as flatten
from memgrad.ops.movement import hstack as hstack
from memgrad.ops.movement import movedim as movedim
from memgrad.ops.movement import narrow as narrow
from memgrad.ops.movement import permute as permute
from memgrad.ops.movement import reshape as reshape
from memgrad.ops.movement import split as split
from memgrad.ops.movement import squeeze as squeeze
from memgrad.ops.movement import stack as stack
from memgrad.ops.movement import t as t
from memgrad.ops.movement import transpose as transpose
from memgrad.ops.movement import unbind as unbind
from memgrad.ops.movement import unflatten as unflatten
from memgrad.ops.movement import unsqueeze as unsqueeze
from memgrad.ops.movement import view as view
from memgrad.ops.movement import vstack as vstack
from memgrad.ops.reduce import amax as amax
from memgrad.ops.reduce import amin as amin
from memgrad.ops.reduce import argmax as argmax
from memgrad.ops.reduce import argmin as argmin
from memgrad.ops.reduce import log_softmax as log_softmax
from memgrad.ops.reduce import logsumexp as logsumexp
from memgrad.ops.reduce import mean as mean
from memgrad.ops.reduce import softmax as softmax
from memgrad.ops.reduce import std as std
from memgrad.ops.reduce import sum as sum
from memgrad.ops.reduce import var as var
from memgrad.ops.unary import acos as acos
from memgrad.ops.unary import asin as asin
from memgrad.ops.unary import atan as atan
from memgrad.ops.unary import atan2 as atan2
from memgrad.ops.unary import ceil as ceil
from memgrad.ops.unary import cos as cos
from memgrad.ops.unary import cosh as cosh
from memgrad.ops.unary import erf as erf
from memgrad.ops.unary import expm1 as expm1
from memgrad.ops.unary import floor as floor
from memgrad.ops.unary import fmod as fmod
from memgrad.ops.unary import isfinite as isfinite
from memgrad.ops.unary import isinf as isinf
from memgrad.ops.unary import isnan as isnan
from memgrad.ops.unary import log1p as log1p
from memgrad.ops.unary import log2 as log2
from memgrad.ops.unary import log10 as log10
from memgrad.ops.unary import round as round
from memgrad.ops.unary import rsqrt as rsqrt
from memgrad.ops.unary import sin as sin
from memgrad.ops.unary import sinh as sinh
from memgrad.ops.unary import tan as tan
from memgrad.ops.unary import trunc as trunc

HANDLES: dict[str, Any]
attention_softmax: Primitive
attention_softmax_backward: Primitive
causal_matmul: Primitive
contiguous: Primitive
conv2d: Primitive
conv2d_input_grad: Primitive
conv2d_weight_grad: Primitive
copy: Primitive
elu: Primitive
embedding: Primitive
fill: Primitive
fold: Primitive
gather_backward: Primitive
gelu: Primitive
gelu_backward: Primitive
getitem: Primitive
index_put: Primitive
index_scatter: Primitive
layer_norm: Primitive
layer_norm_backward: Primitive
layer_norm_grads: Primitive
layer_norm_weight_grad: Primitive
leaky_relu: Primitive
linear: Primitive
linear_input_grad: Primitive
linear_rows: Primitive
linear_weight_grad: Primitive
log_softmax_backward: Primitive
logical_not: Primitive
max_pool2d: Primitive
max_pool2d_backward: Primitive
max_pool2d_indices: Primitive
mish: Primitive
nll_loss: Primitive
nll_loss_backward: Primitive
one_hot: Primitive
pad: Primitive
relu_backward: Primitive
self_attention: Primitive
self_attention_backward: Primitive
sigmoid_backward: Primitive
silu: Primitive
softmax_backward: Primitive
softplus: Primitive
squared_error_grad: Primitive
squared_error_sum: Primitive
std_from_var: Primitive
sum_to: Primitive
tanh_backward: Primitive
to: Primitive
unfold: Primitive
vector_norm: Primitive
view_write: Primitive

def add(input: Any, other: Any, *, alpha: Any = ...) -> Tensor: ...
def all(input: Tensor, dim: Any = ..., keepdim: bool = ...) -> Tensor: ...
def allclose(
    input: Any,
    other: Any,
    rtol: float = ...,
    atol: float = ...,
    equal_nan: bool = ...,
) -> bool: ...
def any(input: Tensor, dim: Any = ..., keepdim: bool = ...) -> Tensor: ...
def clamp(input: Tensor, min: Any = ..., max: Any = ...) -> Tensor: ...
def clip(input: Tensor, min: Any = ..., max: Any = ...) -> Tensor: ...
def div(input: Any, other: Any, *, rounding_mode: str | None = ...) -> Tensor: ...
def dropout(input: Tensor, p: float, train: bool) -> Tensor: ...
def eq(input: Any, other: Any) -> Tensor: ...
def equal(input: Tensor, other: Tensor) -> bool: ...
def floor_divide(input: Any, other: Any) -> Tensor: ...
def ge(input: Any, other: Any) -> Tensor: ...
def gt(input: Any, other: Any) -> Tensor: ...
def le(input: Any, other: Any) -> Tensor: ...
def lerp(input: Tensor, end: Any, weight: Any) -> Tensor: ...
def logical_and(input: Any, other: Any) -> Tensor: ...
def logical_or(input: Any, other: Any) -> Tensor: ...
def logical_xor(input: Any, other: Any) -> Tensor: ...
def lt(input: Any, other: Any) -> Tensor: ...
def matmul(input: Tensor, other: Tensor) -> Tensor: ...
def maximum(input: Any, other: Any) -> Tensor: ...
def minimum(input: Any, other: Any) -> Tensor: ...
def mul(input: Any, other: Any) -> Tensor: ...
def ne(input: Any, other: Any) -> Tensor: ...
def numel(input: Tensor) -> int: ...
def pow(input: Any, exponent: Any) -> Tensor: ...
def remainder(input: Any, other: Any) -> Tensor: ...
def square(input: Any) -> Tensor: ...
def sub(input: Any, other: Any, *, alpha: Any = ...) -> Tensor: ...
def true_divide(input: Any, other: Any) -> Tensor: ...
def where(condition: Any, input: Any, other: Any) -> Tensor: ...
