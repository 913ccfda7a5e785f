"""Reads the weight files Crucible writes the way a Python user would, and prints them.

usage: read_weights.py FILE.pt [FILE.safetensors]

FILE.pt is opened with torch.load(weights_only=True): no code is unpickled. FILE.safetensors is
read twice, by the few lines below (the format's specification: an 8-byte little-endian header
length, a JSON header, raw little-endian data) and, when it is installed, by the safetensors
package; both must give tensors equal to FILE.pt's. Prints one line per tensor, sorted by name:
`name dtype [shape] sum`, then `safetensors package: yes|no`. Exits 1 on any difference.
"""
import json
import struct
import sys

import torch

DTYPES = {
    "BOOL": torch.bool, "U8": torch.uint8, "I8": torch.int8, "I16": torch.int16,
    "I32": torch.int32, "I64": torch.int64, "F16": torch.float16, "BF16": torch.bfloat16,
    "F32": torch.float32, "F64": torch.float64,
}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    body = data[8 + length:]
    tensors, spans = {}, []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        spans.append((begin, end))
        dtype = DTYPES[info["dtype"]]
        flat = (torch.frombuffer(bytearray(body[begin:end]), dtype=dtype) if end > begin
                else torch.empty(0, dtype=dtype))
        tensors[name] = flat.reshape(info["shape"])
    position = 0
    for begin, end in sorted(spans):
        if begin != position:
            sys.exit(f"{path}: data offsets leave a gap or overlap at byte {begin}")
        position = end
    if position != len(body):
        sys.exit(f"{path}: data is {len(body)} bytes, the header covers {position}")
    return tensors


def same(name, a, b, source):
    if set(a) != set(b):
        sys.exit(f"{source}: names differ: {sorted(set(a) ^ set(b))}")
    for key in a:
        if a[key].dtype != b[key].dtype or not torch.equal(a[key], b[key]):
            sys.exit(f"{source}: tensor {key} differs from {name}")


def main():
    pt = torch.load(sys.argv[1], weights_only=True)
    if len(sys.argv) > 2:
        same(sys.argv[1], pt, read_safetensors(sys.argv[2]), sys.argv[2] + " (own reader)")
    try:
        import safetensors.torch
        have_package = True
    except ImportError:
        have_package = False
    if have_package and len(sys.argv) > 2:
        same(sys.argv[1], pt, safetensors.torch.load_file(sys.argv[2]),
             sys.argv[2] + " (safetensors package)")
    for name in sorted(pt):
        t = pt[name]
        print(name, t.dtype, list(t.shape), repr(float(t.double().sum())))
    print("safetensors package:", "yes" if have_package else "no")


main()
