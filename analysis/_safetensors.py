"""Read the integer tensors of a safetensors file with the standard library only.

Format (https://github.com/huggingface/safetensors): an 8-byte little-endian header length N,
N bytes of JSON `{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}`,
then the byte buffer the offsets point into (little-endian data, no gaps). Parsing it here keeps
numpy and torch out of `genrun verify`'s start-up, which is most of its run time.
"""

import json
import struct
import sys
from array import array

_INT_TYPECODES = {"I64": "q", "I32": "i", "I16": "h", "I8": "b", "U64": "Q", "U32": "I", "U16": "H", "U8": "B"}
_HEADER_LIMIT = 100 << 20  # bytes; the format caps the header at 100 MB


class SafetensorsError(ValueError):
    """The bytes are not a valid safetensors file of 1-D integer tensors."""


def read_int_tensors(data: bytes) -> dict[str, array]:
    """name -> array('q') of every tensor; raises SafetensorsError naming what is wrong. # each: [count] int64"""
    if len(data) < 8:
        raise SafetensorsError(f"{len(data)} bytes: too short for the 8-byte header length")
    (header_len,) = struct.unpack_from("<Q", data, 0)
    if header_len > min(_HEADER_LIMIT, len(data) - 8):
        raise SafetensorsError(f"header length {header_len} exceeds the file ({len(data)} bytes)")
    try:
        header = json.loads(data[8 : 8 + header_len])
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SafetensorsError(f"header is not JSON: {exc}") from None
    except RecursionError:  # a header nested thousands deep: damage, never a crash
        raise SafetensorsError("header is nested too deeply to be a safetensors header") from None
    except ValueError as exc:  # an integer of thousands of digits (Python's int parsing limit): damage, never a crash
        raise SafetensorsError(f"header holds a number too long to be a shape or offset ({_shortened(str(exc))})") from None
    if not isinstance(header, dict):
        raise SafetensorsError("header is not a JSON object")
    buffer = memoryview(data)[8 + header_len :]
    tensors: dict[str, array] = {}
    spans = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        tensors[name], span = _tensor(name, info, buffer)
        spans.append(span)
    covered = 0
    for begin, end in sorted(spans):  # the format forbids holes and overlaps
        if begin != covered:
            raise SafetensorsError(f"data is not contiguous at byte {covered} (next tensor starts at {begin})")
        covered = end
    if covered != len(buffer):
        raise SafetensorsError(f"data covers {covered} of {len(buffer)} buffer bytes (truncated or padded file)")
    return tensors


def _tensor(name: str, info: object, buffer: memoryview) -> tuple[array, tuple[int, int]]:
    if not isinstance(info, dict) or set(info) - {"dtype", "shape", "data_offsets"}:
        raise SafetensorsError(f"tensor {_shortened(repr(name))}: malformed header entry {_shortened(repr(info))}")
    dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
    typecode = _INT_TYPECODES.get(dtype)  # type: ignore[arg-type]
    if typecode is None:
        raise SafetensorsError(f"tensor {_shortened(repr(name))} has dtype {_shortened(repr(dtype))}, not an integer type")
    if not (isinstance(shape, list) and len(shape) == 1 and isinstance(shape[0], int)):
        raise SafetensorsError(f"tensor {_shortened(repr(name))} has shape {_shortened(repr(shape))}, not 1-D")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)):
        raise SafetensorsError(f"tensor {_shortened(repr(name))} has data_offsets {_shortened(repr(offsets))}")
    begin, end = offsets
    values = array(typecode)
    if not 0 <= begin <= end <= len(buffer) or end - begin != shape[0] * values.itemsize:
        raise SafetensorsError(f"tensor {_shortened(repr(name))}: data_offsets {offsets} do not hold {shape[0]} {dtype} values "
                               f"within a {len(buffer)}-byte buffer")
    values.frombytes(buffer[begin:end])
    if sys.byteorder == "big":
        values.byteswap()
    return (values if typecode == "q" else array("q", values)), (begin, end)


def _shortened(text: str, limit: int = 80) -> str:
    """At most `limit` characters of a header value in a message: a hostile header can hold names of any length."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} characters)"
