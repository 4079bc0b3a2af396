"""PyTorch's attention and transformer modules: ``MultiheadAttention``,
``TransformerEncoderLayer``, ``TransformerEncoder``, ``TransformerDecoderLayer``,
``TransformerDecoder`` and ``Transformer``, with PyTorch's arguments, shapes, mask
conventions and parameter names (so a state dict exported from PyTorch loads).

Example:
    >>> import memgrad as mg
    >>> layer = mg.nn.TransformerEncoderLayer(16, 4, dim_feedforward=32, batch_first=True)
    >>> mg.nn.TransformerEncoder(layer, num_layers=2)(mg.randn(2, 5, 16)).shape
    (2, 5, 16)
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from memgrad.autograd.grad_mode import no_grad
from memgrad.errors import ShapeError
from memgrad.factories import check_device, dtype_of, empty, zeros
from memgrad.nn import functional as F
from memgrad.nn import init
from memgrad.nn.layers import Dropout, LayerNorm, Linear
from memgrad.nn.module import Module, ModuleList, Parameter
from memgrad.tensor import Tensor

__all__ = ["MultiheadAttention", "TransformerEncoderLayer", "TransformerEncoder",
           "TransformerDecoderLayer", "TransformerDecoder", "Transformer"]


def _additive(mask: Tensor | None, dtype: np.dtype, name: str) -> Tensor | None:
    """A mask as scores to add: a bool mask's True (PyTorch's "not allowed") is -inf."""
    if mask is None:
        return None
    if not isinstance(mask, Tensor):
        raise TypeError(f"MultiheadAttention: {name} must be a Tensor or None, got "
                        f"{type(mask).__name__}")
    if mask.dtype == np.bool_:
        return Tensor(np.where(mask.numpy(), -np.inf, 0.0).astype(dtype))
    if mask.dtype.kind != "f":
        raise TypeError(f"MultiheadAttention: {name} must be a bool or floating tensor, got "
                        f"dtype {mask.dtype}")
    return mask if mask.dtype == dtype else mask.to(dtype)


class MultiheadAttention(Module):
    """Attention of ``query`` over ``key``/``value`` with ``num_heads`` heads, as
    ``torch.nn.MultiheadAttention``: inputs ``(L, N, E)`` (``(N, L, E)`` with
    ``batch_first=True``, or unbatched ``(L, E)``), returning ``(output, weights)``.

    Args:
        embed_dim: the model size ``E`` (the query's last dimension).
        num_heads: heads; they must divide ``embed_dim``.
        dropout: dropout probability on the attention weights in training mode.
        bias: whether the input and output projections have biases.
        add_bias_kv: not supported (raises).
        add_zero_attn: not supported (raises).
        kdim: the key's size (``embed_dim`` by default).
        vdim: the value's size (``embed_dim`` by default).
        batch_first: inputs and outputs are ``(N, L, E)``.

    The projections are ``in_proj_weight`` (``3E x E``, when key and value have size ``E``)
    or ``q_proj_weight``/``k_proj_weight``/``v_proj_weight``, ``in_proj_bias`` and
    ``out_proj``, initialised as PyTorch does (Xavier-uniform, zero biases).

    Example:
        >>> import memgrad as mg
        >>> mha = mg.nn.MultiheadAttention(8, 2, batch_first=True)
        >>> out, weights = mha(mg.randn(3, 5, 8), mg.randn(3, 7, 8), mg.randn(3, 7, 8))
        >>> out.shape, weights.shape
        ((3, 5, 8), (3, 5, 7))
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        add_bias_kv: bool = False,
        add_zero_attn: bool = False,
        kdim: int | None = None,
        vdim: int | None = None,
        batch_first: bool = False,
    ) -> None:
        super().__init__()
        api = "MultiheadAttention"
        for name, v in (("embed_dim", embed_dim), ("num_heads", num_heads)):
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v <= 0:
                raise ValueError(f"{api}: {name} must be a positive int, got {v!r}")
        if embed_dim % num_heads:
            raise ValueError(f"{api}: embed_dim ({embed_dim}) must be divisible by num_heads "
                             f"({num_heads})")
        if not 0.0 <= dropout <= 1.0:
            raise ValueError(f"{api}: dropout probability has to be between 0 and 1, but got "
                             f"{dropout}")
        if add_bias_kv or add_zero_attn:
            raise NotImplementedError(f"{api}: add_bias_kv and add_zero_attn are not "
                                      "supported; append the extra key/value rows to key and "
                                      "value yourself")
        self.embed_dim, self.num_heads = int(embed_dim), int(num_heads)
        self.head_dim = self.embed_dim // self.num_heads
        self.kdim = self.embed_dim if kdim is None else int(kdim)
        self.vdim = self.embed_dim if vdim is None else int(vdim)
        self.dropout, self.batch_first = float(dropout), bool(batch_first)
        self._qkv_same_embed_dim = self.kdim == self.embed_dim and self.vdim == self.embed_dim
        e = self.embed_dim
        if self._qkv_same_embed_dim:
            self.in_proj_weight = Parameter(empty(3 * e, e))
        else:
            self.q_proj_weight = Parameter(empty(e, e))
            self.k_proj_weight = Parameter(empty(e, self.kdim))
            self.v_proj_weight = Parameter(empty(e, self.vdim))
        self.in_proj_bias = Parameter(zeros(3 * e)) if bias else None
        self.out_proj = Linear(e, e, bias=bias)
        with no_grad():
            if self._qkv_same_embed_dim:
                init.xavier_uniform_(self.in_proj_weight)
            else:
                for w in (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight):
                    init.xavier_uniform_(w)
            if bias:
                init.zeros_(self.out_proj.bias)

    def _projections(self) -> tuple[Tensor, Tensor, Tensor]:
        if self._qkv_same_embed_dim:
            w = self.in_proj_weight
            e = self.embed_dim
            return w[:e], w[e:2 * e], w[2 * e:]
        return self.q_proj_weight, self.k_proj_weight, self.v_proj_weight

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        key_padding_mask: Tensor | None = None,
        need_weights: bool = True,
        attn_mask: Tensor | None = None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """``(output, weights)``: weights ``(N, L, S)`` averaged over heads (or ``(N, H, L,
        S)``), None with ``need_weights=False``. A bool mask's True means "may not attend";
        a float mask is added to the scores. ``is_causal`` is a hint that ``attn_mask`` is
        the causal mask, which must be given, as in PyTorch."""
        unbatched = query.ndim == 2
        self._check_inputs(query, key, value, unbatched)
        if is_causal and attn_mask is None:
            raise RuntimeError("MultiheadAttention: is_causal=True is a hint that attn_mask is "
                               "the causal mask; pass attn_mask as well (e.g. "
                               "mg.ones(L, L, dtype=mg.bool).triu(1))")
        if unbatched:
            query, key, value = (t.unsqueeze(1) for t in (query, key, value))
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        elif self.batch_first:
            query, key, value = (t.transpose(0, 1) for t in (query, key, value))
        out, weights = self._attend(query, key, value, key_padding_mask, need_weights,
                                    attn_mask, average_attn_weights)
        if unbatched:
            out = out.squeeze(1)
            weights = None if weights is None else weights.squeeze(0)
        elif self.batch_first:
            out = out.transpose(0, 1)
        return out, weights

    def _check_inputs(self, query: Tensor, key: Tensor, value: Tensor, unbatched: bool) -> None:
        want = 2 if unbatched else 3
        for name, t, size in (("query", query, self.embed_dim), ("key", key, self.kdim),
                              ("value", value, self.vdim)):
            if not isinstance(t, Tensor):
                raise TypeError(f"MultiheadAttention: {name} must be a Tensor, got "
                                f"{type(t).__name__}")
            if t.ndim != want or t.shape[-1] != size:
                form = "(L, E)" if unbatched else ("(N, L, E)" if self.batch_first
                                                   else "(L, N, E)")
                raise ShapeError(f"MultiheadAttention: {name} must have shape {form} with "
                                 f"last size {size} (like query, {want}-D), got {t.shape}")
        if key.shape[:-1] != value.shape[:-1]:
            raise ShapeError(f"MultiheadAttention: key {key.shape} and value {value.shape} "
                             "must agree in all but the last dimension")

    def _attend(self, query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Any,
                need_weights: bool, attn_mask: Any, average: bool):
        length, n, e = query.shape
        source = key.shape[0]
        h, d = self.num_heads, self.head_dim
        wq, wk, wv = self._projections()
        b = self.in_proj_bias
        bq, bk, bv = (None, None, None) if b is None else (b[:e], b[e:2 * e], b[2 * e:])
        q = F.linear(query, wq, bq).reshape(length, n * h, d).transpose(0, 1)
        k = F.linear(key, wk, bk).reshape(source, n * h, d).transpose(0, 1)
        v = F.linear(value, wv, bv).reshape(source, n * h, d).transpose(0, 1)
        mask = self._mask(attn_mask, key_padding_mask, q.dtype, n, length, source)
        p = self.dropout if self.training else 0.0
        if need_weights:
            scores = (q * (1.0 / math.sqrt(d))) @ k.transpose(1, 2)
            if mask is not None:
                scores = scores + mask
            weights = F.softmax(scores, -1)
            attended = (F.dropout(weights, p) if p > 0.0 else weights) @ v
        else:
            attended = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
            weights = None
        out = self.out_proj(attended.transpose(0, 1).reshape(length * n, e)).reshape(length, n, e)
        if weights is not None:
            weights = weights.reshape(n, h, length, source)
            if average:
                weights = weights.mean(1)
        return out, weights

    def _mask(self, attn_mask: Any, key_padding_mask: Any, dtype: np.dtype, n: int,
              length: int, source: int) -> Tensor | None:
        """The attention and padding masks as one additive mask over (N*H, L, S)."""
        mask = _additive(attn_mask, dtype, "attn_mask")
        if mask is not None and mask.shape not in ((length, source),
                                                   (n * self.num_heads, length, source)):
            raise ShapeError(f"MultiheadAttention: attn_mask must have shape ({length}, "
                             f"{source}) or ({n * self.num_heads}, {length}, {source}), got "
                             f"{mask.shape}")
        pad = _additive(key_padding_mask, dtype, "key_padding_mask")
        if pad is None:
            return mask
        if pad.shape != (n, source):
            raise ShapeError(f"MultiheadAttention: key_padding_mask must have shape ({n}, "
                             f"{source}), got {pad.shape}")
        pad = pad.reshape(n, 1, 1, source).expand(n, self.num_heads, 1, source)
        pad = pad.reshape(n * self.num_heads, 1, source)
        return pad if mask is None else mask + pad

    def extra_repr(self) -> str:
        return (f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, "
                f"dropout={self.dropout}, batch_first={self.batch_first}")


_ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {"relu": F.relu, "gelu": F.gelu}


def _activation(activation: Any, api: str) -> Callable[[Tensor], Tensor]:
    if isinstance(activation, str):
        if activation not in _ACTIVATIONS:
            raise ValueError(f"{api}: activation should be relu/gelu, not {activation}")
        return _ACTIVATIONS[activation]
    if not callable(activation):
        raise TypeError(f"{api}: activation must be 'relu', 'gelu' or a function, got "
                        f"{type(activation).__name__}")
    return activation


def _copies(layer: Any, num_layers: Any, api: str) -> ModuleList:
    """``num_layers`` deep copies of ``layer``, each with its own parameters."""
    if not isinstance(layer, Module):
        raise TypeError(f"{api}: the layer must be a Module, got {type(layer).__name__}")
    if not isinstance(num_layers, (int, np.integer)) or num_layers < 1:
        raise ValueError(f"{api}: num_layers must be a positive int, got {num_layers!r}")
    return ModuleList([copy.deepcopy(layer) for _ in range(num_layers)])


class TransformerEncoderLayer(Module):
    """Self-attention and a feed-forward block, each with a residual connection and layer
    norm, as ``torch.nn.TransformerEncoderLayer`` (post-norm by default, ``norm_first=True``
    for pre-norm).

    Args:
        d_model: the model size.
        nhead: attention heads.
        dim_feedforward: the feed-forward block's hidden size.
        dropout: dropout after attention, inside and after the feed-forward block, and on
            the attention weights.
        activation: ``"relu"``, ``"gelu"`` or a function of one tensor.
        layer_norm_eps: the layer norms' epsilon.
        batch_first: inputs are ``(N, L, E)`` rather than ``(L, N, E)``.
        norm_first: normalise before attention and the feed-forward block (pre-norm).
        bias: biases in the linear layers and the layer norms.

    Example:
        >>> import memgrad as mg
        >>> layer = mg.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16)
        >>> layer(mg.randn(5, 3, 8)).shape
        (5, 3, 8)
    """

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation: str | Callable[[Tensor], Tensor] = "relu",
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
    ) -> None:
        super().__init__()
        activation = _activation(activation, "TransformerEncoderLayer")
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                            batch_first=batch_first)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.activation = activation

    def forward(self, src: Tensor, src_mask: Tensor | None = None,
                src_key_padding_mask: Tensor | None = None, is_causal: bool = False) -> Tensor:
        """One layer over ``src``; the masks are ``MultiheadAttention``'s ``attn_mask`` and
        ``key_padding_mask``."""
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            return x + self._ff_block(self.norm2(x))
        x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal))
        return self.norm2(x + self._ff_block(x))

    def _sa_block(self, x: Tensor, mask: Any, padding: Any, is_causal: bool) -> Tensor:
        out = self.self_attn(x, x, x, attn_mask=mask, key_padding_mask=padding,
                             need_weights=False, is_causal=is_causal)[0]
        return self.dropout1(out)

    def _ff_block(self, x: Tensor) -> Tensor:
        return self.dropout2(self.linear2(self.dropout(self.activation(self.linear1(x)))))


class TransformerEncoder(Module):
    """``num_layers`` copies of ``encoder_layer`` (each its own parameters, copied from the
    one given), then ``norm`` if given, as ``torch.nn.TransformerEncoder``.

    Example:
        >>> import memgrad as mg
        >>> layer = mg.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16)
        >>> len(mg.nn.TransformerEncoder(layer, 3).layers)
        3
    """

    def __init__(self, encoder_layer: Module, num_layers: int, norm: Module | None = None,
                 enable_nested_tensor: bool = True, mask_check: bool = True) -> None:
        super().__init__()
        self.layers = _copies(encoder_layer, num_layers, "TransformerEncoder")
        self.num_layers = int(num_layers)
        self.norm = norm

    def forward(self, src: Tensor, mask: Tensor | None = None,
                src_key_padding_mask: Tensor | None = None,
                is_causal: bool | None = None) -> Tensor:
        """Run the layers in turn with the same masks, then ``norm``."""
        x = src
        for layer in self.layers:
            x = layer(x, src_mask=mask, src_key_padding_mask=src_key_padding_mask,
                      is_causal=bool(is_causal))
        return x if self.norm is None else self.norm(x)


class TransformerDecoderLayer(Module):
    """Self-attention, attention over the encoder's output (``memory``) and a feed-forward
    block, each with a residual connection and layer norm, as
    ``torch.nn.TransformerDecoderLayer`` (post-norm by default, ``norm_first=True`` for
    pre-norm). The arguments are ``TransformerEncoderLayer``'s.

    Example:
        >>> import memgrad as mg
        >>> layer = mg.nn.TransformerDecoderLayer(8, 2, dim_feedforward=16)
        >>> layer(mg.randn(4, 3, 8), mg.randn(6, 3, 8)).shape
        (4, 3, 8)
    """

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation: str | Callable[[Tensor], Tensor] = "relu",
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
    ) -> None:
        super().__init__()
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                            batch_first=batch_first)
        self.multihead_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                                 batch_first=batch_first)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.norm3 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.dropout3 = Dropout(dropout)
        self.activation = _activation(activation, "TransformerDecoderLayer")

    def forward(self, tgt: Tensor, memory: Tensor, tgt_mask: Tensor | None = None,
                memory_mask: Tensor | None = None,
                tgt_key_padding_mask: Tensor | None = None,
                memory_key_padding_mask: Tensor | None = None, tgt_is_causal: bool = False,
                memory_is_causal: bool = False) -> Tensor:
        """One layer over ``tgt`` attending to ``memory``; the masks are
        ``MultiheadAttention``'s."""
        x = tgt
        if self.norm_first:
            x = x + self._sa(self.norm1(x), tgt_mask, tgt_key_padding_mask, tgt_is_causal)
            x = x + self._mha(self.norm2(x), memory, memory_mask, memory_key_padding_mask,
                              memory_is_causal)
            return x + self._ff(self.norm3(x))
        x = self.norm1(x + self._sa(x, tgt_mask, tgt_key_padding_mask, tgt_is_causal))
        x = self.norm2(x + self._mha(x, memory, memory_mask, memory_key_padding_mask,
                                     memory_is_causal))
        return self.norm3(x + self._ff(x))

    def _sa(self, x: Tensor, mask: Any, padding: Any, is_causal: bool) -> Tensor:
        return self.dropout1(self.self_attn(x, x, x, attn_mask=mask, key_padding_mask=padding,
                                            need_weights=False, is_causal=is_causal)[0])

    def _mha(self, x: Tensor, memory: Tensor, mask: Any, padding: Any,
             is_causal: bool) -> Tensor:
        return self.dropout2(self.multihead_attn(x, memory, memory, attn_mask=mask,
                                                 key_padding_mask=padding, need_weights=False,
                                                 is_causal=is_causal)[0])

    def _ff(self, x: Tensor) -> Tensor:
        return self.dropout3(self.linear2(self.dropout(self.activation(self.linear1(x)))))


class TransformerDecoder(Module):
    """``num_layers`` copies of ``decoder_layer``, then ``norm`` if given, as
    ``torch.nn.TransformerDecoder``.

    Example:
        >>> import memgrad as mg
        >>> layer = mg.nn.TransformerDecoderLayer(8, 2, dim_feedforward=16)
        >>> mg.nn.TransformerDecoder(layer, 2)(mg.randn(4, 3, 8), mg.randn(6, 3, 8)).shape
        (4, 3, 8)
    """

    def __init__(self, decoder_layer: Module, num_layers: int,
                 norm: Module | None = None) -> None:
        super().__init__()
        self.layers = _copies(decoder_layer, num_layers, "TransformerDecoder")
        self.num_layers = int(num_layers)
        self.norm = norm

    def forward(self, tgt: Tensor, memory: Tensor, tgt_mask: Tensor | None = None,
                memory_mask: Tensor | None = None,
                tgt_key_padding_mask: Tensor | None = None,
                memory_key_padding_mask: Tensor | None = None,
                tgt_is_causal: bool | None = None, memory_is_causal: bool = False) -> Tensor:
        """Run the layers in turn with the same masks, then ``norm``."""
        x = tgt
        for layer in self.layers:
            x = layer(x, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                      tgt_key_padding_mask=tgt_key_padding_mask,
                      memory_key_padding_mask=memory_key_padding_mask,
                      tgt_is_causal=bool(tgt_is_causal), memory_is_causal=memory_is_causal)
        return x if self.norm is None else self.norm(x)


class Transformer(Module):
    """An encoder-decoder transformer, as ``torch.nn.Transformer``: ``num_encoder_layers``
    encoder layers and ``num_decoder_layers`` decoder layers, each stack ending in a layer
    norm. ``forward(src, tgt)`` returns the decoder's output.

    Example:
        >>> import memgrad as mg
        >>> model = mg.nn.Transformer(8, 2, 1, 1, dim_feedforward=16, batch_first=True)
        >>> mask = mg.nn.Transformer.generate_square_subsequent_mask(4)
        >>> model(mg.randn(3, 6, 8), mg.randn(3, 4, 8), tgt_mask=mask).shape
        (3, 4, 8)
    """

    def __init__(
        self,
        d_model: int = 512,
        nhead: int = 8,
        num_encoder_layers: int = 6,
        num_decoder_layers: int = 6,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation: str | Callable[[Tensor], Tensor] = "relu",
        custom_encoder: Module | None = None,
        custom_decoder: Module | None = None,
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
    ) -> None:
        super().__init__()
        shared = dict(dim_feedforward=dim_feedforward, dropout=dropout, activation=activation,
                      layer_norm_eps=layer_norm_eps, batch_first=batch_first,
                      norm_first=norm_first, bias=bias)
        if custom_encoder is None:
            custom_encoder = TransformerEncoder(
                TransformerEncoderLayer(d_model, nhead, **shared), num_encoder_layers,
                LayerNorm(d_model, eps=layer_norm_eps, bias=bias))
        if custom_decoder is None:
            custom_decoder = TransformerDecoder(
                TransformerDecoderLayer(d_model, nhead, **shared), num_decoder_layers,
                LayerNorm(d_model, eps=layer_norm_eps, bias=bias))
        self.encoder, self.decoder = custom_encoder, custom_decoder
        self.d_model, self.nhead, self.batch_first = d_model, nhead, batch_first

    def forward(self, src: Tensor, tgt: Tensor, src_mask: Tensor | None = None,
                tgt_mask: Tensor | None = None, memory_mask: Tensor | None = None,
                src_key_padding_mask: Tensor | None = None,
                tgt_key_padding_mask: Tensor | None = None,
                memory_key_padding_mask: Tensor | None = None,
                src_is_causal: bool | None = None, tgt_is_causal: bool | None = None,
                memory_is_causal: bool = False) -> Tensor:
        """Encode ``src``, then decode ``tgt`` attending to the encoding."""
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask,
                              is_causal=src_is_causal)
        return self.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                            tgt_key_padding_mask=tgt_key_padding_mask,
                            memory_key_padding_mask=memory_key_padding_mask,
                            tgt_is_causal=tgt_is_causal, memory_is_causal=memory_is_causal)

    @staticmethod
    def generate_square_subsequent_mask(sz: int, device: Any = None,
                                        dtype: Any = None) -> Tensor:
        """The ``(sz, sz)`` causal mask: ``-inf`` above the diagonal, 0 elsewhere (float32
        unless ``dtype`` says otherwise).

        Example:
            >>> import memgrad as mg
            >>> mg.nn.Transformer.generate_square_subsequent_mask(2)
            tensor([[  0., -inf],
                    [  0.,   0.]])
        """
        check_device(device, "generate_square_subsequent_mask")
        kind = np.float32 if dtype is None else dtype_of(dtype, "generate_square_subsequent_mask")
        above = np.triu(np.ones((sz, sz), dtype=bool), 1)
        return Tensor(np.where(above, -np.inf, 0.0).astype(kind))
