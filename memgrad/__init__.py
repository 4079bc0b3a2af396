"""memgrad: a memory-saving training toolkit with PyTorch's eager API.

Example:
    >>> import memgrad as mg
    >>> x = mg.tensor([1.0, 2.0], requires_grad=True)
    >>> (x * x).sum().backward()
    >>> x.grad
    tensor([2., 4.])
"""

from numpy import dtype  # the class of memgrad's dtypes, which are NumPy's (torch.dtype)

from memgrad import (  # noqa: F401 (_kernels)
    _kernels,
    autograd,
    checkpoint,
    distributed,
    jit,
    memory,
    nn,
    ops,
    optim,
    random,
    utils,
)
from memgrad.autograd.grad_mode import (
    enable_grad,
    inference_mode,
    is_grad_enabled,
    no_grad,
    set_grad_enabled,
)
from memgrad.errors import (
    CheckpointError,
    GradcheckError,
    MemgradError,
    PlanError,
    ShapeError,
    TraceError,
)
from memgrad.factories import (
    arange,
    as_tensor,
    device,
    empty,
    empty_like,
    eye,
    from_numpy,
    full,
    full_like,
    is_tensor,
    linspace,
    logspace,
    ones,
    ones_like,
    rand,
    rand_like,
    randint,
    randint_like,
    randn,
    randn_like,
    randperm,
    tensor,
    zeros,
    zeros_like,
)
from memgrad.ops import *  # noqa: F403 (the public functions: NOTE [ Public names ])
from memgrad.ops import linalg
from memgrad.random import Generator, fork_rng, get_rng_state, manual_seed, seed, set_rng_state
from memgrad.serialization import load, save
from memgrad.tensor import Tensor, bool_, float16, float32, float64, int32, int64
from memgrad.tensor import bool_ as bool  # noqa: A004 (torch's dtype names)
from memgrad.tensor import float16 as half
from memgrad.tensor import float32 as float  # noqa: A004
from memgrad.tensor import float64 as double
from memgrad.tensor import int32 as int  # noqa: A004
from memgrad.tensor import int64 as long

__version__ = "0.1.0"

__all__ = [
    "Tensor", "tensor", "from_numpy", "zeros", "ones", "empty", "full", "zeros_like",
    "ones_like", "full_like", "empty_like", "arange", "linspace", "logspace", "eye", "randn",
    "rand", "randint",
    "randn_like", "rand_like", "randint_like", "randperm", "device", "manual_seed", "seed",
    "get_rng_state", "set_rng_state", "fork_rng", "Generator", "random", "save", "load",
    "utils", "dtype", "float16", "float32", "float64", "int32", "int64", "bool_", "half", "float",
    "double", "int", "long", "bool", "linalg", "no_grad", "enable_grad",
    "set_grad_enabled", "inference_mode", "is_grad_enabled", "as_tensor", "is_tensor",
    "autograd", "checkpoint", "distributed", "memory",
    "jit", "nn", "ops", "optim", "MemgradError", "ShapeError", "CheckpointError",
    "GradcheckError", "PlanError", "TraceError", "__version__",
]
__all__ += ops.__all__
