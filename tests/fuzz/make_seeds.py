#!/usr/bin/env python3
"""make_seeds.py: writes the binary seed corpora of tests/fuzz (corpus/idx, corpus/npy,
corpus/checkpoint) with the standard library alone: small valid files of each format, laid out
as the harnesses read them (fuzz_util.h: a flags byte saying which of the two files the harness
gzip-compresses, the first file's length, the two files). The JSON corpora (model, trace) are
copied files; see docs/TESTING.md. Usage: python3 tests/fuzz/make_seeds.py"""
import gzip
import json
import os
import random
import struct

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def put(kind, name, data):
    os.makedirs(os.path.join(HERE, kind), exist_ok=True)
    with open(os.path.join(HERE, kind, name), "wb") as f:
        f.write(data)


def pair(flags, a, b):
    assert len(a) < 65536
    return bytes([flags]) + struct.pack("<H", len(a)) + a + b


def gz(b):
    return gzip.compress(b, mtime=0)


# ---- IDX (big-endian header: magic, dims; unsigned bytes)
def idx_images(n, rows, cols, rng):
    return struct.pack(">IIII", 0x803, n, rows, cols) + bytes(rng.randrange(256) for _ in range(n * rows * cols))


def idx_labels(n, rng):
    return struct.pack(">II", 0x801, n) + bytes(rng.randrange(10) for _ in range(n))


# ---- .npy (magic, version, little-endian header length, a dict padded to 64 bytes, the data)
def npy(descr, shape, values, version=1):
    fmt = {"<f4": "<f", "<f8": "<d", "|u1": "B", "<u1": "B", "<i4": "<i", "<i8": "<q", "<u4": "<I"}[descr]
    shape_text = "(%d,)" % shape[0] if len(shape) == 1 else "(" + ", ".join(str(d) for d in shape) + ")"
    header = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape_text)
    prefix = 10 if version == 1 else 12
    pad = (64 - (prefix + len(header) + 1) % 64) % 64
    header = (header + " " * pad + "\n").encode("latin1")
    lenfield = struct.pack("<H", len(header)) if version == 1 else struct.pack("<I", len(header))
    data = b"".join(struct.pack(fmt, v) for v in values)
    return b"\x93NUMPY" + bytes([version, 0]) + lenfield + header + data


# ---- safetensors (u64 header length, JSON header, the data)
def safetensors(tensors, meta=None):
    header, blobs, off = {}, [], 0
    for name, dtype, shape, values in tensors:
        fmt = "<f" if dtype == "F32" else "<q"
        blob = b"".join(struct.pack(fmt, v) for v in values)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(blob)]}
        blobs.append(blob)
        off += len(blob)
    if meta is not None:
        header["__metadata__"] = meta
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def main():
    rng = random.Random(19)
    put("idx", "plain_3x2x2", pair(0, idx_images(3, 2, 2, rng), idx_labels(3, rng)))
    put("idx", "compressed_both_4x3x3", pair(3, idx_images(4, 3, 3, rng), idx_labels(4, rng)))
    put("idx", "compressed_images_2x5x4", pair(1, idx_images(2, 5, 4, rng), idx_labels(2, rng)))
    put("idx", "compressed_labels_1x28x28", pair(2, idx_images(1, 28, 28, rng), idx_labels(1, rng)))
    put("idx", "gzip_bytes_5x4x4", pair(0, gz(idx_images(5, 4, 4, rng)), gz(idx_labels(5, rng))))

    f = lambda n: [rng.uniform(-3, 3) for _ in range(n)]
    i = lambda n, hi: [rng.randrange(hi) for _ in range(n)]
    put("npy", "f4_i8", pair(0, npy("<f4", (3, 2), f(6)), npy("<i8", (3,), [0, 2, 1])))
    put("npy", "u1_u4_compressed", pair(3, npy("|u1", (2, 2, 2), i(8, 256)), npy("<u4", (2, 1), [1, 0])))
    put("npy", "tokens_i4", pair(1, npy("<i4", (2, 3), i(6, 50)), npy("<i4", (2, 3), i(6, 50))))
    put("npy", "f8_v2_u1_v3", pair(0, npy("<f8", (2, 3), f(6), 2), npy("|u1", (2,), [3, 1], 3)))
    put("npy", "tokens_i8_gzip_bytes",
        pair(0, gz(npy("<i8", (3, 4), i(12, 9))), gz(npy("<i8", (3, 4, 1), i(12, 9)))))

    put("checkpoint", "mlp", safetensors(
        [("0.weight", "F32", [3, 2], f(6)), ("0.bias", "F32", [3], f(3)), ("2.weight", "F32", [2, 3], f(6))],
        {"format": "pt", "vktrain_version": "0.1.0", "step": "12", "epoch": "1"}))
    put("checkpoint", "int64_scalar_empty", safetensors(
        [("step", "I64", [], [42]), ("ids", "I64", [2, 2], [1, -5, 16777216, 0]), ("empty", "F32", [0, 3], [])]))
    put("checkpoint", "no_metadata_4d", safetensors([("conv.weight", "F32", [2, 1, 2, 2], f(8))]))
    put("checkpoint", "optimizer_state", safetensors(
        [("adamw.m.0.weight", "F32", [2], f(2)), ("adamw.v.0.weight", "F32", [2], f(2)), ("adamw.t", "I64", [1], [3])],
        {"optimizer": "adamw", "optimizer_state": "ck.optim-s3.safetensors"}))


if __name__ == "__main__":
    main()
