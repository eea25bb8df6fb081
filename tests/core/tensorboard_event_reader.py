"""An independent reader of TensorBoard event files for tests/core/tensorboard_writer_test.cpp.

It shares no code and no .proto with ooze: the TFRecord framing, CRC-32C and the protobuf wire
format are decoded here from their definitions. Usage: tensorboard_event_reader.py FILE...
Prints one JSON object per record:
  {"file": NAME, "record": I, "wall_time": W, "step": S, "file_version": V,
   "values": [{"tag": T, "simple_value": X} or {"tag": T, "plugin": P, "dtype": D,
              "rank": R, "strings": [...]}]}
Non-finite simple values are printed as the strings "nan", "inf", "-inf" (JSON has no such
numbers). A bad CRC or a truncated record prints the problem on stderr and exits with 1.
"""
import json
import math
import os
import struct
import sys


def make_crc32c_table():
    # Castagnoli polynomial 0x1EDC6F41, bit-reversed.
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


CRC32C_TABLE = make_crc32c_table()


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc = CRC32C_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


assert crc32c(b"123456789") == 0xE3069283


def read_varint(data, pos):
    value = 0
    shift = 0
    while True:
        if pos >= len(data):
            raise ValueError("varint runs past the end of the message")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def fields(data):
    """Yields (field number, wire type, value) of a serialized message; value is an int for
    varints, bytes for fixed64/fixed32/length-delimited fields."""
    pos = 0
    while pos < len(data):
        key, pos = read_varint(data, pos)
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            value, pos = read_varint(data, pos)
        elif wire_type == 1:
            value, pos = data[pos:pos + 8], pos + 8
        elif wire_type == 2:
            length, pos = read_varint(data, pos)
            value, pos = data[pos:pos + length], pos + length
        elif wire_type == 5:
            value, pos = data[pos:pos + 4], pos + 4
        else:
            raise ValueError("unsupported wire type %d" % wire_type)
        if pos > len(data):
            raise ValueError("field %d runs past the end of the message" % number)
        yield number, wire_type, value


def as_int64(varint):
    return varint - (1 << 64) if varint >= 1 << 63 else varint


def json_float(value):
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value


def decode_tensor(data, out):
    out["strings"] = []
    out["rank"] = 0
    for number, _, value in fields(data):
        if number == 1:  # dtype
            out["dtype"] = value
        elif number == 2:  # tensor_shape: its repeated dim (2) fields give the rank
            out["rank"] = sum(1 for n, _, _ in fields(value) if n == 2)
        elif number == 8:  # string_val
            out["strings"].append(value.decode("utf-8"))


def decode_value(data):
    out = {}
    for number, _, value in fields(data):
        if number == 1:  # tag
            out["tag"] = value.decode("utf-8")
        elif number == 2:  # simple_value, float32
            out["simple_value"] = json_float(struct.unpack("<f", value)[0])
        elif number == 8:  # tensor
            decode_tensor(value, out)
        elif number == 9:  # metadata -> plugin_data (1) -> plugin_name (1)
            for n, _, plugin_data in fields(value):
                if n == 1:
                    for m, _, name in fields(plugin_data):
                        if m == 1:
                            out["plugin"] = name.decode("utf-8")
    return out


def decode_event(data):
    event = {"wall_time": 0.0, "step": 0}
    for number, _, value in fields(data):
        if number == 1:  # wall_time, double
            event["wall_time"] = struct.unpack("<d", value)[0]
        elif number == 2:  # step, int64
            event["step"] = as_int64(value)
        elif number == 3:  # file_version
            event["file_version"] = value.decode("utf-8")
        elif number == 5:  # summary: repeated Value value = 1
            event["values"] = [decode_value(v) for n, _, v in fields(value) if n == 1]
    return event


def read_records(path):
    with open(path, "rb") as f:
        data = f.read()
    pos = 0
    index = 0
    while pos < len(data):
        where = "%s record %d (offset %d)" % (os.path.basename(path), index, pos)
        if pos + 12 > len(data):
            raise ValueError("%s: truncated header" % where)
        header = data[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[pos + 8:pos + 12])
        if masked(crc32c(header)) != length_crc:
            raise ValueError("%s: length CRC mismatch" % where)
        start = pos + 12
        if start + length + 4 > len(data):
            raise ValueError("%s: truncated data" % where)
        payload = data[start:start + length]
        (data_crc,) = struct.unpack("<I", data[start + length:start + length + 4])
        if masked(crc32c(payload)) != data_crc:
            raise ValueError("%s: data CRC mismatch" % where)
        yield index, payload
        pos = start + length + 4
        index += 1


def main():
    try:
        for path in sys.argv[1:]:
            for index, payload in read_records(path):
                event = decode_event(payload)
                event["file"] = os.path.basename(path)
                event["record"] = index
                print(json.dumps(event))
    except ValueError as error:
        print("tensorboard_event_reader: %s" % error, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
