"""Reads a TensorBoard event file the way TensorBoard does, and prints its events as JSON.

usage: read_tensorboard.py EVENTS_FILE

Each TFRecord's two checksums are checked with crcmod's CRC-32C (masked as TFRecord masks them:
rotated right by 15 bits, plus 0xA282EAD8), and each record is parsed by Google's protobuf
library as a tensorflow.Event, whose message types are declared below with TensorFlow's field
numbers (event.proto, summary.proto; SessionLog only as far as its status). When the tensorboard package is installed, its own
EventFileLoader reads the file as well and must find the same events. Prints one JSON list of
{"wall_time", "step", "file_version", "session_start", "scalars": {tag: value}}, then `tensorboard package:
yes|no`. Exits 1 on a bad checksum, a torn record or a difference.

The directories in CRUCIBLE_PYTHON_FALLBACK_PATH (colon-separated) are searched after the
interpreter's own, for a machine whose Python lacks protobuf or crcmod (tools/gpu unpacks Debian's
there).
"""
import json
import os
import struct
import sys

sys.path.extend(p for p in os.environ.get("CRUCIBLE_PYTHON_FALLBACK_PATH", "").split(":") if p)

import crcmod.predefined  # noqa: E402
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory  # noqa: E402

CRC32C = crcmod.predefined.mkCrcFun("crc-32c")


def masked(data):
    crc = CRC32C(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def event_class():
    f = descriptor_pb2.FileDescriptorProto(name="tb_event.proto", package="tb", syntax="proto3")
    T = descriptor_pb2.FieldDescriptorProto

    def message(name, fields):
        m = f.message_type.add(name=name)
        for field_name, number, kind, label, type_name in fields:
            field = m.field.add(name=field_name, number=number, type=kind, label=label)
            if type_name:
                field.type_name = type_name

    opt, rep = T.LABEL_OPTIONAL, T.LABEL_REPEATED
    message("Value", [("tag", 1, T.TYPE_STRING, opt, None),
                      ("simple_value", 2, T.TYPE_FLOAT, opt, None)])
    message("Summary", [("value", 1, T.TYPE_MESSAGE, rep, ".tb.Value")])
    # SessionLog.status is an enum (START = 1); its varint reads the same as an int32's.
    message("SessionLog", [("status", 1, T.TYPE_INT32, opt, None)])
    message("Event", [("wall_time", 1, T.TYPE_DOUBLE, opt, None),
                      ("step", 2, T.TYPE_INT64, opt, None),
                      ("file_version", 3, T.TYPE_STRING, opt, None),
                      ("summary", 5, T.TYPE_MESSAGE, opt, ".tb.Summary"),
                      ("session_log", 7, T.TYPE_MESSAGE, opt, ".tb.SessionLog")])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    descriptor = pool.FindMessageTypeByName("tb.Event")
    if hasattr(message_factory, "GetMessageClass"):
        return message_factory.GetMessageClass(descriptor)
    return message_factory.MessageFactory(pool).GetPrototype(descriptor)


def as_dict(event):
    return {"wall_time": event.wall_time, "step": event.step, "file_version": event.file_version,
            "session_start": event.session_log.status == 1,
            "scalars": {v.tag: v.simple_value for v in event.summary.value}}


def read(path):
    Event = event_class()
    with open(path, "rb") as f:
        data = f.read()
    events, at = [], 0
    while at < len(data):
        if len(data) - at < 12:
            sys.exit(f"{path}: a torn record header at byte {at}")
        (length,) = struct.unpack("<Q", data[at:at + 8])
        (length_crc,) = struct.unpack("<I", data[at + 8:at + 12])
        if length_crc != masked(data[at:at + 8]):
            sys.exit(f"{path}: bad length checksum at byte {at}")
        body = data[at + 12:at + 12 + length]
        if len(body) != length or len(data) < at + 16 + length:
            sys.exit(f"{path}: a torn record at byte {at}")
        (body_crc,) = struct.unpack("<I", data[at + 12 + length:at + 16 + length])
        if body_crc != masked(body):
            sys.exit(f"{path}: bad data checksum at byte {at}")
        event = Event()
        event.ParseFromString(body)
        events.append(as_dict(event))
        at += 16 + length
    return events


def read_with_tensorboard(path):
    """The events as the tensorboard package loads them. Its loader moves a scalar's simple_value
    into a tensor (as the scalars dashboard reads it), so that tensor is the value read here."""
    try:
        from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
        from tensorboard.util import tensor_util
    except ImportError:
        return None

    def value(v):
        if v.HasField("tensor"):
            return float(tensor_util.make_ndarray(v.tensor))
        return v.simple_value

    return [dict(as_dict(e), scalars={v.tag: value(v) for v in e.summary.value})
            for e in EventFileLoader(path).Load()]


def main():
    events = read(sys.argv[1])
    theirs = read_with_tensorboard(sys.argv[1])
    if theirs is not None and theirs != events:
        sys.exit("the tensorboard package reads other events:\n" + json.dumps(theirs))
    print(json.dumps(events))
    print("tensorboard package:", "no" if theirs is None else "yes")


if __name__ == "__main__":
    main()
