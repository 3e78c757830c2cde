"""Test data written without TensorFlow: tf.Example protos in their wire format, TFRecord
framing with masked CRC32C, and JPEGs through Pillow."""

import struct


def _varint(n):
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number, wire_type, payload):
    key = _varint((number << 3) | wire_type)
    if wire_type == 2:
        return key + _varint(len(payload)) + payload
    return key + payload


def example(features):
    """A serialized tf.Example. features: {key: list of bytes | list of int | list of float}
    (the list type chooses bytes_list, int64_list or float_list)."""
    entries = b""
    for key, values in features.items():
        if values and isinstance(values[0], bytes):
            lst = b"".join(_field(1, 2, v) for v in values)
            feature = _field(1, 2, lst)  # Feature.bytes_list
        elif values and isinstance(values[0], float):
            packed = b"".join(struct.pack("<f", v) for v in values)
            feature = _field(2, 2, _field(1, 2, packed))  # Feature.float_list, packed
        else:
            packed = b"".join(_varint(v & 0xFFFFFFFFFFFFFFFF) for v in values)
            feature = _field(3, 2, _field(1, 2, packed))  # Feature.int64_list, packed
        entry = _field(1, 2, key.encode()) + _field(2, 2, feature)  # map entry
        entries += _field(1, 2, entry)  # Features.feature
    return _field(1, 2, entries)  # Example.features


def _crc32c_table():
    table = []
    for i in range(256):
        crc = i
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_TABLE = _crc32c_table()


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc = _TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _masked(crc):
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def write_tfrecord(path, records):
    with open(path, "wb") as f:
        for r in records:
            length = struct.pack("<Q", len(r))
            f.write(length + struct.pack("<I", _masked(crc32c(length))))
            f.write(r + struct.pack("<I", _masked(crc32c(r))))


def jpeg_bytes(array, quality=95):
    import io

    from PIL import Image
    out = io.BytesIO()
    Image.fromarray(array).save(out, format="JPEG", quality=quality)
    return out.getvalue()
