#pragma once

// TensorBoard's event files. A file is a sequence of TFRecords (a little-endian uint64 length,
// the masked CRC-32C of those 8 bytes, the data, the masked CRC-32C of the data), each holding
// one tensorflow.Event protocol buffer. Only the fields Crucible writes are encoded and decoded:
// Event.wall_time (1), Event.step (2), Event.file_version (3) and Event.summary (5), whose
// Summary.value (1) entries hold a tag (1) and a simple_value (2).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace crucible::metrics {

struct Scalar {
  std::string tag;
  float value = 0;
};

struct Event {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;     // "brain.Event:2" in a file's first event, else empty
  std::vector<Scalar> scalars;  // the summary's simple values
};

// The protocol buffer of `event`: its file version when that is not empty, else its scalars.
std::string encode_event(const Event& event);

// `data` decoded, or nullopt when it is not a well-formed protocol buffer. Fields other than the
// ones above are skipped.
std::optional<Event> decode_event(const std::string& data);

// `data` framed as one TFRecord.
std::string frame_record(const std::string& data);

// The events of the file at `path` in order, up to the first record that is torn (cut short by
// a kill), fails its checksum or does not decode; nothing when the file does not exist. Throws
// TrainingError naming the path when it exists but cannot be read.
std::vector<Event> read_event_file(const std::string& path);

// Rewrites the file at `path` (atomically) to hold its file version event and its events of a
// step no greater than `step`, dropping a torn or damaged tail (resume support); does nothing
// when the file does not exist. Throws TrainingError naming the path on failure.
void truncate_event_file(const std::string& path, int64_t step);

}  // namespace crucible::metrics
