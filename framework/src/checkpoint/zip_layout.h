#pragma once

// The structure of a zip archive, checked before LibTorch's reader sees it.

#include <string_view>

namespace crucible::checkpoint {

// Checks that `bytes` is a zip archive whose every declared extent lies inside it: the end of
// central directory record (and its zip64 form when present) ending the file, the central
// directory, and each entry's local header and stored (uncompressed) data. torch.save and
// torch_dict_bytes write such archives. The pickle they hold (the entry data.pkl, under a folder
// or not) must pass check_pickle. LibTorch's in-memory reader trusts these fields and
// reads past the buffer for a damaged one, and its unpickler fills a damaged length's worth of
// memory, so torch::pickle_load gets only bytes that pass. Throws TrainingError naming `source`
// and the first field that does not fit.
void check_zip_layout(std::string_view bytes, const std::string& source);

}  // namespace crucible::checkpoint
