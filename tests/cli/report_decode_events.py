"""Decodes a bigtrain TensorBoard event file with Google's protobuf runtime and checks
it against metrics.csv.

  report_decode_events.py PROTO_PYTHON_DIR EVENT_FILE METRICS_CSV

PROTO_PYTHON_DIR holds tensorboard_event_pb2.py (protoc --python_out). The TFRecord
checksums are verified with a CRC-32C written here from the definition (bitwise, no
table), independent of bigtrain's table-driven one.
"""
import csv
import math
import struct
import sys


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(blob: bytes):
    offset = 0
    while offset < len(blob):
        if offset + 12 > len(blob):
            raise SystemExit(f"FAIL: truncated record header at byte {offset}")
        header = blob[offset:offset + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", blob[offset + 8:offset + 12])
        if length_crc != masked(header):
            raise SystemExit(f"FAIL: length CRC mismatch at byte {offset}")
        data = blob[offset + 12:offset + 12 + length]
        (data_crc,) = struct.unpack("<I", blob[offset + 12 + length:offset + 16 + length])
        if len(data) != length or data_crc != masked(data):
            raise SystemExit(f"FAIL: data CRC mismatch at byte {offset}")
        yield data
        offset += 16 + length


def main():
    sys.path.insert(0, sys.argv[1])
    import tensorboard_event_pb2 as pb

    blob = open(sys.argv[2], "rb").read()
    events = []
    for data in records(blob):
        event = pb.Event()
        event.ParseFromString(data)
        if event.SerializeToString() != data:
            raise SystemExit("FAIL: re-encoding an event does not give the same bytes (unknown or misplaced fields)")
        events.append(event)
    if not events or events[0].file_version != "brain.Event:2":
        raise SystemExit("FAIL: the first event must carry file_version brain.Event:2")

    with open(sys.argv[3], newline="") as f:
        rows = list(csv.DictReader(f))
    scalar_events = events[1:]
    if len(scalar_events) != len(rows):
        raise SystemExit(f"FAIL: {len(scalar_events)} scalar events for {len(rows)} metrics.csv rows")
    checked = 0
    previous_time = events[0].wall_time
    for event, row in zip(scalar_events, rows):
        if event.step != int(row["epoch"]):
            raise SystemExit(f"FAIL: step {event.step} for epoch {row['epoch']}")
        if event.wall_time < previous_time:
            raise SystemExit("FAIL: wall times go backwards")
        previous_time = event.wall_time
        if not all(v.HasField("simple_value") for v in event.summary.value):
            raise SystemExit(f"FAIL: a value without simple_value at epoch {row['epoch']}")
        values = {v.tag: v.simple_value for v in event.summary.value}
        expected = {f"{row['split']}/{k}": float(v) for k, v in row.items() if k not in ("epoch", "split") and v != ""}
        if set(values) != set(expected):
            raise SystemExit(f"FAIL: tags {sorted(values)} != metrics.csv columns {sorted(expected)}")
        for tag, want in expected.items():
            # simple_value is a float32: the CSV value rounded to the nearest float32
            # must come back exactly.
            want32 = struct.unpack("<f", struct.pack("<f", want))[0]
            if not (values[tag] == want32 or (math.isnan(want32) and math.isnan(values[tag]))):
                raise SystemExit(f"FAIL: {tag} at epoch {row['epoch']}: {values[tag]!r} != {want32!r}")
            checked += 1
    print(f"ok: {len(events)} events, {checked} scalars equal metrics.csv, all CRCs verify")


main()
