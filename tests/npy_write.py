"""npy_write.py: .npy files (format version 1.0) for the shell tests, written without numpy.

    PYTHONPATH=tests python3 - <<'PY'
    from npy_write import npy
    npy(path, "<f4", (64, 784), values)   # values: a sequence of numbers, or the packed bytes
    PY
"""
import struct

CODES = {"<f4": "f", "<f8": "d", "<i4": "i", "<i8": "q", "<u4": "I", "|u1": "B"}


def npy(path, descr, shape, data):
    dims = ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "")
    h = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (descr, dims)
    h += " " * (63 - (10 + len(h)) % 64) + "\n"  # the header ends on a multiple of 64 bytes
    if not isinstance(data, (bytes, bytearray)):
        data = struct.pack("<%d%s" % (len(data), CODES[descr]), *data)
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode() + data)
