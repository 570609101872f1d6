"""vkt_torch.py: a vktrain model file as a torch.nn module, for the PyTorch scripts
(scripts/torch_bench.py, scripts/train_compare.py, tests/torch_equiv.py), and the MNIST-layout
(IDX) reader they share.

The module comes from `vktrain model FILE --torch`: the engine's layer kinds write their own
torch.nn modules (engine/nn/layers/*.c), so these scripts never switch on a layer kind and a new
kind needs nothing here. Parameter names are those of vktrain's checkpoints, so
load_state_dict(strict=True) takes a vktrain checkpoint as it is.
"""
import gzip
import json
import struct
import subprocess

import numpy as np

import torch
from torch import nn


class Residual(nn.Sequential):
    """y = x + body(x); the body's layers are this module's children 0, 1, ..."""

    def forward(self, x):  # noqa: D102 -- as the class says
        return x + super().forward(x)


class CausalSelfAttention(nn.MultiheadAttention):
    """Self-attention (query = key = value = x, batch_first) under a causal mask: position t
    attends to positions <= t. Its parameters are nn.MultiheadAttention's: in_proj_weight,
    in_proj_bias, out_proj.weight, out_proj.bias."""

    def forward(self, x):  # noqa: D102 -- as the class says
        t = x.shape[-2]
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool, device=x.device), diagonal=1)
        return super().forward(x, x, x, attn_mask=mask, need_weights=False)[0]


class PositionEmbedding(nn.Module):
    """x + weight[:T]: a learned position embedding of max_len positions, added to [B, T, C]."""

    def __init__(self, max_len, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(max_len, dim))

    def forward(self, x):  # noqa: D102 -- as the class says
        return x + self.weight[:x.shape[-2]]


class TokenEmbedding(nn.Embedding):
    """nn.Embedding over token ids that arrive as floats (vktrain's inputs are fp32)."""

    def forward(self, x):  # noqa: D102 -- as the class says
        return super().forward(x.long())


def build(vktrain, model_path):
    """The model as a torch.nn.Sequential, and its JSON description (input shape and the rest)."""
    expr = subprocess.run([vktrain, "model", model_path, "--torch"], check=True,
                          capture_output=True, text=True).stdout.strip()
    module = eval(expr, {"__builtins__": {}}, {"nn": nn, "Residual": Residual, "CausalSelfAttention": CausalSelfAttention,
                   "PositionEmbedding": PositionEmbedding, "TokenEmbedding": TokenEmbedding})  # noqa: S307
    with open(model_path) as f:
        spec = json.load(f)
    return module, spec


def write_safetensors(path, tensors):
    """tensors (a state_dict) as a safetensors file: F32, and I64 for int64 buffers."""
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        i64 = t.dtype == torch.int64
        b = t.detach().contiguous().numpy().astype("<i8" if i64 else "<f4").tobytes()
        header[name] = {"dtype": "I64" if i64 else "F32", "shape": list(t.shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - (8 + len(h)) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_safetensors(path):
    """A safetensors file (F32 and I64 tensors) as a dict of torch tensors."""
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        dt = {"F32": "<f4", "I64": "<i8"}[info["dtype"]]
        out[name] = torch.from_numpy(
            np.frombuffer(data[8 + n + b:8 + n + e], dtype=dt).reshape(info["shape"]).copy())
    return out


def read_idx(path):
    """A gzip'd IDX file as numpy: images [n, rows * cols] u8, or labels [n] u8."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, n = struct.unpack(">II", data[:8])
    if magic == 0x803:
        rows, cols = struct.unpack(">II", data[8:16])
        return np.frombuffer(data[16:], dtype=np.uint8).reshape(n, rows * cols)
    return np.frombuffer(data[8:], dtype=np.uint8)
