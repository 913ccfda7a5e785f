#pragma once

// TensorBoard's event files. A file is a sequence of TFRecords (a little-endian uint64 length,
// the masked CRC-32C of those 8 bytes, the data, the masked CRC-32C of the data), each holding
// one tensorflow.Event protocol buffer. Only the fields Crucible writes are encoded and decoded:
// Event.wall_time (1), Event.step (2), Event.file_version (3), Event.summary (5), whose
// Summary.value (1) entries hold a tag (1) and a simple_value (2), and Event.session_log (7) with
// SessionLog.status (1) START.

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
  // A SessionLog START: TensorBoard drops every event it holds of a step >= step, as a restarted
  // run will write them again.
  bool session_start = false;
};

// The protocol buffer of `event`: its file version when that is not empty, else its session
// start when set, else its scalars.
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

// What a resume at `step` keeps of the event file at `path`: its events of a step no greater than
// `step` (not its file version event or session starts), framed as records, and whether that is
// the whole file (no event dropped, no torn or damaged tail). Nothing, whole, when the file does
// not exist. Throws TrainingError naming the path when it cannot be read.
struct KeptEvents {
  std::string records;
  bool whole = true;
  std::optional<double> started;  // the wall time of the file version event, when it has one
};
KeptEvents events_until(const std::string& path, int64_t step);

}  // namespace crucible::metrics
