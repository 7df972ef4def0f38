"""torch.nn's Transformer: the encoder and decoder layers, their stacks,
and the whole model, with PyTorch's parameter names, arguments and masks
(MultiheadAttention's)."""
import copy
import math

from .. import functional as _F
from . import init
from .layers import Dropout, LayerNorm, Linear, MultiheadAttention, _on_device
from .module import Module, ModuleList

_ACTIVATIONS = {"relu": _F.relu, "gelu": _F.gelu}


def _activation(activation):
    return _ACTIVATIONS[activation] if isinstance(activation, str) else activation


def _sublayers(layer, attentions, d_model, nhead, dim_feedforward, dropout, activation, eps,
               batch_first, norm_first, dtype):
    """What the encoder and decoder layers share, in PyTorch's names and
    order: the attentions named, the feed-forward block, and a LayerNorm
    and a Dropout for each sublayer (norm1, dropout1, ...)."""
    for name in attentions:
        setattr(layer, name, MultiheadAttention(d_model, nhead, dropout=dropout,
                                                batch_first=batch_first, dtype=dtype))
    layer.linear1 = Linear(d_model, dim_feedforward, dtype=dtype)
    layer.dropout = Dropout(dropout)
    layer.linear2 = Linear(dim_feedforward, d_model, dtype=dtype)
    layer.norm_first = norm_first
    for i in range(1, len(attentions) + 2):
        setattr(layer, f"norm{i}", LayerNorm(d_model, eps=eps, dtype=dtype))
    for i in range(1, len(attentions) + 2):
        setattr(layer, f"dropout{i}", Dropout(dropout))
    layer.activation = _activation(activation)


class TransformerEncoderLayer(Module):
    """torch.nn.TransformerEncoderLayer: self-attention and a feed-forward
    block, each with a residual and LayerNorm (after, or before with
    norm_first), PyTorch's parameter names."""

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation="relu",
                 layer_norm_eps=1e-5, batch_first=False, norm_first=False, device=None,
                 dtype=None):
        super().__init__()
        _on_device(self, device, None)
        _sublayers(self, ("self_attn",), d_model, nhead, dim_feedforward, dropout, activation,
                   layer_norm_eps, batch_first, norm_first, dtype)

    def _sa(self, x, mask, padding, is_causal):
        return self.dropout1(self.self_attn(x, x, x, attn_mask=mask, key_padding_mask=padding,
                                            need_weights=False, is_causal=is_causal)[0])

    def _ff(self, x):
        return self.dropout2(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal=False):
        x, masks = src, (src_mask, src_key_padding_mask, is_causal)
        if self.norm_first:
            x = x + self._sa(self.norm1(x), *masks)
            return x + self._ff(self.norm2(x))
        x = self.norm1(x + self._sa(x, *masks))
        return self.norm2(x + self._ff(x))


class TransformerEncoder(Module):
    """torch.nn.TransformerEncoder; enable_nested_tensor and mask_check (the
    nested-tensor fast path of PyTorch's inference) are taken and change
    nothing."""

    def __init__(self, encoder_layer, num_layers, norm=None, enable_nested_tensor=True,
                 mask_check=True):
        super().__init__()
        self.enable_nested_tensor, self.mask_check = enable_nested_tensor, mask_check
        self.layers = ModuleList([copy.deepcopy(encoder_layer) for _ in range(num_layers)])
        self.norm = norm

    def forward(self, src, mask=None, src_key_padding_mask=None, is_causal=False):
        for layer in self.layers:
            src = layer(src, mask, src_key_padding_mask, bool(is_causal))
        return self.norm(src) if self.norm is not None else src


class TransformerDecoderLayer(Module):
    """torch.nn.TransformerDecoderLayer: self-attention over the target,
    attention to the encoder's memory, and a feed-forward block, each with
    a residual and LayerNorm (after, or before with norm_first)."""

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation="relu",
                 layer_norm_eps=1e-5, batch_first=False, norm_first=False, device=None,
                 dtype=None):
        super().__init__()
        _on_device(self, device, None)
        _sublayers(self, ("self_attn", "multihead_attn"), d_model, nhead, dim_feedforward,
                   dropout, activation, layer_norm_eps, batch_first, norm_first, dtype)

    def _sa(self, x, mask, padding, is_causal):
        return self.dropout1(self.self_attn(x, x, x, attn_mask=mask, key_padding_mask=padding,
                                            need_weights=False, is_causal=is_causal)[0])

    def _mha(self, x, memory, mask, padding, is_causal):
        return self.dropout2(self.multihead_attn(x, memory, memory, attn_mask=mask,
                                                 key_padding_mask=padding, need_weights=False,
                                                 is_causal=is_causal)[0])

    def _ff(self, x):
        return self.dropout3(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=False, memory_is_causal=False):
        x = tgt
        own = (tgt_mask, tgt_key_padding_mask, tgt_is_causal)
        cross = (memory_mask, memory_key_padding_mask, memory_is_causal)
        if self.norm_first:
            x = x + self._sa(self.norm1(x), *own)
            x = x + self._mha(self.norm2(x), memory, *cross)
            return x + self._ff(self.norm3(x))
        x = self.norm1(x + self._sa(x, *own))
        x = self.norm2(x + self._mha(x, memory, *cross))
        return self.norm3(x + self._ff(x))


class TransformerDecoder(Module):
    def __init__(self, decoder_layer, num_layers, norm=None):
        super().__init__()
        self.layers = ModuleList([copy.deepcopy(decoder_layer) for _ in range(num_layers)])
        self.num_layers, self.norm = num_layers, norm

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=False, memory_is_causal=False):
        x = tgt
        for layer in self.layers:
            x = layer(x, memory, tgt_mask, memory_mask, tgt_key_padding_mask,
                      memory_key_padding_mask, bool(tgt_is_causal), bool(memory_is_causal))
        return self.norm(x) if self.norm is not None else x


class Transformer(Module):
    """torch.nn.Transformer: an encoder over src and a decoder over tgt that
    attends to the encoder's output, each stack ending in a LayerNorm; its
    matrices drawn by xavier_uniform_, as PyTorch's."""

    def __init__(self, d_model=512, nhead=8, num_encoder_layers=6, num_decoder_layers=6,
                 dim_feedforward=2048, dropout=0.1, activation="relu", custom_encoder=None,
                 custom_decoder=None, layer_norm_eps=1e-5, batch_first=False, norm_first=False,
                 device=None, dtype=None):
        super().__init__()
        _on_device(self, device, None)
        layer_args = (d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                      batch_first, norm_first)
        self.encoder = custom_encoder or TransformerEncoder(
            TransformerEncoderLayer(*layer_args, dtype=dtype), num_encoder_layers,
            LayerNorm(d_model, eps=layer_norm_eps, dtype=dtype))
        self.decoder = custom_decoder or TransformerDecoder(
            TransformerDecoderLayer(*layer_args, dtype=dtype), num_decoder_layers,
            LayerNorm(d_model, eps=layer_norm_eps, dtype=dtype))
        self.d_model, self.nhead, self.batch_first = d_model, nhead, batch_first
        for p in self.parameters():
            if p.ndim > 1:
                init.xavier_uniform_(p)

    def forward(self, src, tgt, src_mask=None, tgt_mask=None, memory_mask=None,
                src_key_padding_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None):
        batch = 0 if self.batch_first else 1
        if src.ndim == 3 and src.shape[batch] != tgt.shape[batch]:
            raise RuntimeError("the batch number of src and tgt must be equal")
        if src.shape[-1] != self.d_model or tgt.shape[-1] != self.d_model:
            raise RuntimeError("the feature number of src and tgt must be equal to d_model")
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask)
        return self.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                            tgt_key_padding_mask=tgt_key_padding_mask,
                            memory_key_padding_mask=memory_key_padding_mask)

    @staticmethod
    def generate_square_subsequent_mask(sz, device=None, dtype=None):
        """A float mask of -inf above the diagonal, 0 on and below."""
        from .. import full, triu
        return triu(full((sz, sz), -math.inf, dtype=dtype), diagonal=1)
