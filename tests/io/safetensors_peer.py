#!/usr/bin/env python3
"""An independent safetensors writer and reader, from the published format and Python's standard
library only (no safetensors, numpy or torch), for tests/runtime/test_checkpoint.cpp:

  safetensors_peer.py write PATH   writes the tensors of EXPECTED (and metadata who=python)
  safetensors_peer.py check PATH   reads PATH (written by xtpu) and checks it holds EXPECTED,
                                   exit 0; else a message and exit 1

Format: 8-byte little-endian header length N; N bytes of JSON, {name: {dtype, shape,
data_offsets: [begin, end]}, "__metadata__": {str: str}}; then the data, row-major, little-endian,
offsets relative to its start, covering it exactly.
"""
import json
import struct
import sys

# name -> (dtype, shape, struct format, values); BF16 values are raw 16-bit patterns
EXPECTED = {
    "w": ("F32", [2, 3], "<6f", [0.5, -1.0, 2.25, 0.0, -0.0, 1e-3]),
    "h": ("BF16", [4], "<4H", [0x3F80, 0xC040, 0x7FC0, 0x0001]),
    "n": ("I32", [], "<1i", [-7]),
    "m": ("BOOL", [3], "<3B", [1, 0, 1]),
}


def write(path):
    header, blobs, offset = {"__metadata__": {"who": "python"}}, [], 0
    for name, (dtype, shape, fmt, values) in EXPECTED.items():
        blob = struct.pack(fmt, *values)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def check(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode())
    data = raw[8 + n:]
    if header.get("__metadata__", {}).get("who") != "xtpu":
        return "__metadata__ who is not 'xtpu': %r" % header.get("__metadata__")
    spans = []
    for name, (dtype, shape, fmt, values) in EXPECTED.items():
        entry = header.get(name)
        if entry is None:
            return "missing " + name
        if entry["dtype"] != dtype or entry["shape"] != shape:
            return "%s is %s %s, expected %s %s" % (name, entry["dtype"], entry["shape"], dtype, shape)
        begin, end = entry["data_offsets"]
        got = list(struct.unpack(fmt, data[begin:end]))
        if fmt.endswith("f"):
            ok = all(struct.pack("<f", a) == struct.pack("<f", b) for a, b in zip(got, values))
        else:
            ok = got == values
        if not ok:
            return "%s holds %r, expected %r" % (name, got, values)
        spans.append((begin, end))
    if len(header) != len(EXPECTED) + 1:
        return "unexpected entries: %r" % sorted(set(header) - set(EXPECTED) - {"__metadata__"})
    at = 0
    for begin, end in sorted(spans):
        if begin != at:
            return "the data has a gap or an overlap at byte %d" % at
        at = end
    if at != len(data):
        return "%d bytes after the last tensor" % (len(data) - at)
    return None


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("write", "check"):
        sys.exit("usage: safetensors_peer.py write|check PATH")
    if sys.argv[1] == "write":
        write(sys.argv[2])
    else:
        problem = check(sys.argv[2])
        if problem:
            sys.exit("safetensors_peer: %s: %s" % (sys.argv[2], problem))
    sys.exit(0)
