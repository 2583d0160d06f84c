"""TensorBoard event files without the tensorboard package: CRC32C, TFRecord framing and
the few protobuf messages a SummaryWriter writes (Event, Summary, HistogramProto,
TensorProto), encoded and decoded by hand.

A record is: uint64 length (little endian), masked CRC32C of those 8 bytes, the data,
masked CRC32C of the data. TensorFlow masks a CRC by rotating it right by 15 bits and
adding 0xa282ead8, so that a CRC of data that holds CRCs stays well distributed.
"""

import struct

# ------------------------------------------------------------------------------ CRC32C
_POLY = 0x82F63B78  # Castagnoli's polynomial, bit-reversed (CRC32C is reflected)


def _make_table():
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ _POLY if crc & 1 else crc >> 1
        table.append(crc)
    return table


_TABLE = _make_table()


def crc32c(data):
    """The CRC32C (Castagnoli) of bytes, as an unsigned 32-bit int."""
    crc = 0xFFFFFFFF
    table = _TABLE
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data):
    crc = crc32c(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def frame_record(data):
    """One TFRecord around the bytes `data`."""
    header = struct.pack("<Q", len(data))
    return (header + struct.pack("<I", masked_crc32c(header)) + data
            + struct.pack("<I", masked_crc32c(data)))


def read_records(path):
    """The data of every record of a TFRecord file, checking both CRCs of each."""
    with open(path, "rb") as f:
        blob = f.read()
    out, pos = [], 0
    while pos < len(blob):
        if pos + 12 > len(blob):
            raise ValueError(f"{path}: truncated record header at byte {pos}")
        header = blob[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (crc,) = struct.unpack("<I", blob[pos + 8:pos + 12])
        if crc != masked_crc32c(header):
            raise ValueError(f"{path}: bad length CRC at byte {pos}")
        data = blob[pos + 12:pos + 12 + length]
        end = pos + 12 + length
        if end + 4 > len(blob):
            raise ValueError(f"{path}: truncated record at byte {pos}")
        (crc,) = struct.unpack("<I", blob[end:end + 4])
        if crc != masked_crc32c(data):
            raise ValueError(f"{path}: bad data CRC at byte {pos}")
        out.append(data)
        pos = end + 4
    return out


# ---------------------------------------------------------------- protobuf wire format
def _varint(value):
    value &= 0xFFFFFFFFFFFFFFFF  # negative int64s are ten bytes of two's complement
    out = bytearray()
    while True:
        bits = value & 0x7F
        value >>= 7
        if value:
            out.append(bits | 0x80)
        else:
            out.append(bits)
            return bytes(out)


def _key(field, wire):
    return _varint(field << 3 | wire)


def f_varint(field, value):
    return _key(field, 0) + _varint(int(value))


def f_double(field, value):
    return _key(field, 1) + struct.pack("<d", float(value))


def f_float(field, value):
    return _key(field, 5) + struct.pack("<f", float(value))


def f_bytes(field, value):
    if isinstance(value, str):
        value = value.encode("utf-8")
    return _key(field, 2) + _varint(len(value)) + value


def f_packed_doubles(field, values):
    return f_bytes(field, b"".join(struct.pack("<d", float(v)) for v in values))


def decode(data):
    """A protobuf message as {field number: [raw values]}: varints as ints, fixed64 and
    fixed32 as their 8 / 4 bytes, length-delimited fields as bytes (decode those again
    when they are messages)."""
    fields, pos = {}, 0
    while pos < len(data):
        key, pos = _read_varint(data, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _read_varint(data, pos)
        elif wire == 1:
            value, pos = data[pos:pos + 8], pos + 8
        elif wire == 5:
            value, pos = data[pos:pos + 4], pos + 4
        elif wire == 2:
            length, pos = _read_varint(data, pos)
            value, pos = data[pos:pos + length], pos + length
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        fields.setdefault(field, []).append(value)
    return fields


def _read_varint(data, pos):
    shift = result = 0
    while True:
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


# ------------------------------------------------------------------- the event messages
def event(wall_time, step=None, *, file_version=None, summary=None, session_start=False):
    """An Event: wall_time=1, step=2, file_version=3, summary=5, session_log=6."""
    out = f_double(1, wall_time)
    if step is not None:
        out += f_varint(2, step)
    if file_version is not None:
        out += f_bytes(3, file_version)
    if summary is not None:
        out += f_bytes(5, summary)
    if session_start:
        out += f_bytes(6, f_varint(1, 1))  # SessionLog.status = START
    return out


def summary_value(tag, *, simple_value=None, histo=None, tensor=None, metadata=None):
    """A Summary holding one Summary.Value: tag=1, simple_value=2, histo=5, tensor=8,
    metadata=9."""
    value = f_bytes(1, tag)
    if simple_value is not None:
        value += f_float(2, simple_value)
    if histo is not None:
        value += f_bytes(5, histo)
    if tensor is not None:
        value += f_bytes(8, tensor)
    if metadata is not None:
        value += f_bytes(9, metadata)
    return f_bytes(1, value)


def histogram_proto(vmin, vmax, num, vsum, sum_squares, limits, counts):
    """HistogramProto: min=1, max=2, num=3, sum=4, sum_squares=5 (doubles),
    bucket_limit=6, bucket=7 (packed doubles)."""
    return (f_double(1, vmin) + f_double(2, vmax) + f_double(3, num) + f_double(4, vsum)
            + f_double(5, sum_squares) + f_packed_doubles(6, limits)
            + f_packed_doubles(7, counts))


def plugin_metadata(plugin_name, content=b""):
    """SummaryMetadata with plugin_data=1 {plugin_name=1, content=2}."""
    plugin = f_bytes(1, plugin_name)
    if content:
        plugin += f_bytes(2, content)
    return f_bytes(1, plugin)


def string_tensor(text):
    """TensorProto of one string: dtype=1 (DT_STRING=7), tensor_shape=2 {dim=2 {size=1}},
    string_val=8."""
    shape = f_bytes(2, f_varint(1, 1))
    return f_varint(1, 7) + f_bytes(2, shape) + f_bytes(8, text)
