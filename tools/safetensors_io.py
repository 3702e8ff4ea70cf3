"""Minimal safetensors reader/writer in plain Python + torch (the `safetensors` package is not
installed here). Format: 8-byte little-endian header length N, N bytes of JSON
{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}, then the
raw little-endian tensor bytes, offsets relative to the end of the header."""

import json
import struct

import torch

_DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "U8": torch.uint8,
}
_NAMES = {v: k for k, v in _DTYPES.items()}


def load_file(path):
    """Returns {name: tensor} (tensors own their memory)."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError(f"{path}: file of {len(raw)} bytes is too short for a header")
    (n,) = struct.unpack("<Q", raw[:8])
    if 8 + n > len(raw):
        raise ValueError(f"{path}: header length {n} exceeds file size {len(raw)}")
    header = json.loads(raw[8 : 8 + n].decode("utf-8"))
    data = raw[8 + n :]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = _DTYPES[info["dtype"]]
        begin, end = info["data_offsets"]
        if end > len(data) or begin > end:
            raise ValueError(f"{path}: tensor {name}: offsets [{begin}, {end}) out of range")
        shape = info["shape"]
        buf = bytearray(data[begin:end])
        if len(buf) == 0:
            out[name] = torch.zeros(shape, dtype=dtype)
        else:
            out[name] = torch.frombuffer(buf, dtype=dtype).reshape(shape).clone()
    return out


def save_file(tensors, path, metadata=None):
    """Writes {name: tensor} in the given (insertion) order, contiguous, 8-byte aligned header."""
    header = {}
    blobs = []
    offset = 0
    for name, t in tensors.items():
        t = t.detach().contiguous().cpu()
        if t.dtype not in _NAMES:
            raise ValueError(f"tensor {name}: unsupported dtype {t.dtype}")
        b = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {
            "dtype": _NAMES[t.dtype],
            "shape": list(t.shape),
            "data_offsets": [offset, offset + len(b)],
        }
        offset += len(b)
        blobs.append(b)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    hb = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hb += b" " * ((8 - len(hb) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for b in blobs:
            f.write(b)
