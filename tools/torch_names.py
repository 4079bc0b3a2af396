"""Write the table of common PyTorch names that memgrad does not have into
docs/coming-from-pytorch.md (between its ``torch-names`` markers).

PyTorch is not needed: the names are a curated list below, of what PyTorch code commonly
uses, grouped by namespace, each with the memgrad namespace it would live in. A name counts
as present when that memgrad namespace has an attribute of the same name; ``RENAMED`` lists
the few that memgrad has under another name. Rerun after adding names to memgrad;
``tests/test_torch_names.py`` fails while the page is stale.

Usage:
    python tools/torch_names.py          # rewrite the table
    python tools/torch_names.py --check  # exit 1 if the page's table is out of date
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "coming-from-pytorch.md"
BEGIN = "<!-- torch-names: begin (made by python tools/torch_names.py; do not edit) -->"
END = "<!-- torch-names: end -->"

# (PyTorch namespace, memgrad namespace, common names). The memgrad side is a module path,
# or a module path and a class (memgrad.Tensor).
COMMON: list[tuple[str, str, str]] = [
    ("torch", "memgrad", """
        tensor from_numpy as_tensor zeros ones empty full zeros_like ones_like empty_like
        full_like arange linspace logspace eye rand randn randint randperm rand_like
        randn_like randint_like manual_seed seed get_rng_state set_rng_state no_grad
        enable_grad set_grad_enabled is_grad_enabled inference_mode is_tensor numel
        cat concat stack hstack vstack split chunk unbind squeeze unsqueeze reshape flatten
        permute transpose t movedim narrow gather scatter scatter_add index_select
        masked_select take_along_dim where nonzero flip roll tile repeat_interleave
        broadcast_to meshgrid tril triu diag add sub mul div true_divide floor_divide
        remainder fmod pow neg abs sign exp expm1 log log1p log2 log10 sqrt rsqrt sin cos tan
        asin acos atan atan2 sinh cosh tanh sigmoid relu erf floor ceil round trunc clamp
        clip maximum minimum lerp sum mean prod std var max min amax amin argmax argmin
        logsumexp cumsum cumprod norm all any sort argsort topk unique eq ne lt le gt ge
        isnan isinf isfinite allclose equal matmul mm bmm einsum outer dot softmax
        log_softmax dropout save load float16 bfloat16 float32 float64 int32 int64 bool
        dtype device Generator
    """),
    ("torch.Tensor", "memgrad.Tensor", """
        shape dtype device ndim dim size numel item tolist numpy to cpu cuda float double half
        long int bool type clone detach detach_ requires_grad requires_grad_ backward grad
        grad_fn is_leaf retain_grad register_hook view view_as reshape reshape_as expand
        expand_as repeat permute transpose t T mT contiguous is_contiguous flatten unflatten
        squeeze unsqueeze chunk split unbind narrow gather scatter scatter_ scatter_add
        scatter_add_ index_select masked_fill masked_fill_ fill_ zero_ copy_ add_ sub_ mul_
        div_ clamp_ normal_ uniform_ sum mean std var max min amax amin argmax argmin prod
        cumsum logsumexp softmax log_softmax abs exp log sqrt tanh sigmoid relu sin cos pow
        matmul norm all any sort topk eq ne lt gt where element_size nbytes new_zeros
        new_ones new_empty new_full new_tensor type_as
    """),
    ("torch.nn", "memgrad.nn", """
        Module Parameter Sequential ModuleList ModuleDict ParameterList ParameterDict
        Identity Linear Bilinear Conv1d Conv2d Conv3d ConvTranspose2d MaxPool1d MaxPool2d
        AvgPool2d AdaptiveAvgPool2d BatchNorm1d BatchNorm2d LayerNorm GroupNorm RMSNorm
        Dropout Embedding EmbeddingBag RNN LSTM GRU MultiheadAttention Transformer
        TransformerEncoder TransformerEncoderLayer TransformerDecoderLayer ReLU GELU SiLU
        Tanh Sigmoid Softmax LogSoftmax LeakyReLU ELU Softplus Mish Flatten Unflatten
        CrossEntropyLoss MSELoss L1Loss NLLLoss BCELoss BCEWithLogitsLoss SmoothL1Loss
        KLDivLoss HuberLoss
    """),
    ("torch.nn.functional", "memgrad.nn.functional", """
        linear conv1d conv2d max_pool2d avg_pool2d adaptive_avg_pool2d relu gelu silu tanh
        sigmoid softmax log_softmax leaky_relu elu softplus dropout layer_norm batch_norm
        group_norm embedding one_hot pad interpolate cross_entropy nll_loss mse_loss l1_loss
        binary_cross_entropy binary_cross_entropy_with_logits smooth_l1_loss kl_div
        scaled_dot_product_attention normalize cosine_similarity unfold fold
    """),
    ("torch.nn.init", "memgrad.nn.init", """
        uniform_ normal_ constant_ zeros_ ones_ xavier_uniform_ xavier_normal_
        kaiming_uniform_ kaiming_normal_ trunc_normal_ orthogonal_ calculate_gain
    """),
    ("torch.nn.utils", "memgrad.nn.utils", """
        clip_grad_norm_ clip_grad_value_ parameters_to_vector vector_to_parameters
    """),
    ("torch.optim", "memgrad.optim", """
        Optimizer SGD Adam AdamW RMSprop Adagrad Adadelta LBFGS
    """),
    ("torch.optim.lr_scheduler", "memgrad.optim.lr_scheduler", """
        LRScheduler StepLR MultiStepLR ExponentialLR CosineAnnealingLR LambdaLR OneCycleLR
        ReduceLROnPlateau LinearLR SequentialLR
    """),
    ("torch.autograd", "memgrad.autograd", """
        backward grad Function gradcheck gradgradcheck detect_anomaly set_detect_anomaly
        functional graph
    """),
    ("torch.autograd.graph", "memgrad.autograd.graph", """
        saved_tensors_hooks save_on_cpu disable_saved_tensors_hooks Node
    """),
    ("torch.utils.checkpoint", "memgrad.checkpoint", """
        checkpoint checkpoint_sequential create_selective_checkpoint_contexts
        CheckpointPolicy
    """),
    ("torch.utils.data", "memgrad.utils.data", """
        Dataset IterableDataset TensorDataset DataLoader Subset random_split ConcatDataset
        Sampler RandomSampler SequentialSampler BatchSampler default_collate
    """),
    ("torch.distributed", "memgrad.distributed", """
        init_process_group destroy_process_group is_initialized get_rank get_world_size
        barrier all_reduce all_gather broadcast reduce_scatter all_gather_object
        broadcast_object_list
    """),
    ("torch.nn.parallel", "memgrad.distributed", "DistributedDataParallel"),
    ("torch.utils.data.distributed", "memgrad.distributed", "DistributedSampler"),
]

# PyTorch's name -> memgrad's name for the same thing, in the namespace COMMON maps it to
RENAMED: dict[str, str] = {
    "torch.bool": "bool_",
    "torch.distributed.init_process_group": "init",
    "torch.distributed.get_rank": "rank",
    "torch.distributed.get_world_size": "world_size",
    "torch.distributed.broadcast_object_list": "broadcast_object",
    "torch.utils.checkpoint.create_selective_checkpoint_contexts": "checkpoint(..., policy=)",
    "torch.utils.checkpoint.CheckpointPolicy": "policy",
}


def namespace(path: str) -> Any:
    """The memgrad module (or class, for ``memgrad.Tensor``) at ``path``; None if absent."""
    module, _, cls = path.rpartition(".") if path.endswith(".Tensor") else (path, "", "")
    try:
        obj = importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name is None or not module.startswith(e.name):
            raise
        return None
    return getattr(obj, cls) if cls else obj


def has(space: Any, torch_path: str, name: str) -> bool:
    """Whether memgrad's ``space`` has PyTorch's ``name``, or RENAMED's name for it."""
    return space is not None and (hasattr(space, name) or renamed(space, torch_path, name))


def renamed(space: Any, torch_path: str, name: str) -> bool:
    """Whether ``space`` lacks PyTorch's ``name`` but has RENAMED's name for the same thing."""
    ours = RENAMED.get(f"{torch_path}.{name}")
    return (space is not None and ours is not None and not hasattr(space, name)
            and hasattr(space, ours.split("(")[0]))


def missing(common: list[tuple[str, str, str]] = COMMON) -> list[tuple[str, str, list[str]]]:
    """For each row of ``common``: the PyTorch names its memgrad namespace lacks."""
    out = []
    for torch_path, ours, names in common:
        space = namespace(ours)
        out.append((torch_path, ours, [n for n in names.split() if not has(space, torch_path, n)]))
    return out


def table(common: list[tuple[str, str, str]] = COMMON) -> str:
    """The Markdown the page holds between its markers."""
    total = sum(len(names.split()) for _, _, names in common)
    rows = missing(common)
    absent = sum(len(names) for _, _, names in rows)
    lines = [
        f"Of {total} names common in PyTorch code, memgrad has {total - absent} (counting",
        f"the renamed ones below); {'this one' if absent == 1 else f'these {absent}'} it "
        "does not have:",
        "",
        "| PyTorch | memgrad | not in memgrad |",
        "| --- | --- | --- |",
    ]
    for torch_path, ours, names in rows:
        if names:
            shown = ", ".join(f"`{n}`" for n in names)
            note = "" if namespace(ours) is not None else " (no such module yet)"
            lines.append(f"| `{torch_path}` | `{ours}`{note} | {shown} |")
    lines += ["", "The same thing under another name:", "",
              "| PyTorch | memgrad |", "| --- | --- |"]
    for torch_path, target, names in common:
        for name in names.split():
            if renamed(namespace(target), torch_path, name):
                ours = RENAMED[f"{torch_path}.{name}"]
                lines.append(f"| `{torch_path}.{name}` | `{target}.{ours}` |")
    return "\n".join(lines) + "\n"


def render(page: str, body: str) -> str:
    """``page`` with the text between its markers replaced by ``body``."""
    head, sep, rest = page.partition(BEGIN)
    _, sep2, tail = rest.partition(END)
    if not sep or not sep2:
        raise SystemExit(f"torch_names: {PAGE} needs the lines {BEGIN!r} and {END!r} around "
                         "the table")
    return f"{head}{BEGIN}\n{body}{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the table is stale")
    args = parser.parse_args(argv)
    old = PAGE.read_text()
    new = render(old, table())
    if args.check:
        if new != old:
            print(f"torch_names: the table in {PAGE.relative_to(ROOT)} is out of date; run "
                  "python tools/torch_names.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
