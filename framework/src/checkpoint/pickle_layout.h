#pragma once

// The structure of a pickle, checked before LibTorch's unpickler reads it.

#include <string>
#include <string_view>

namespace crucible::checkpoint {

// Checks what LibTorch's unpickler takes on trust in `pickle` (protocols 0 to 5), opcode by
// opcode until STOP:
//   - every length-prefixed argument (strings, bytes, long integers, frames) fits in the bytes
//     after it: the unpickler allocates and zero-fills a declared length before it reads it
//     (4 GiB for a damaged 4-byte length);
//   - every memo index stored at is below the pickle's size: the unpickler grows its memo table
//     to it (16 bytes an entry);
//   - every opcode finds the stack items and the mark it takes, above the innermost mark: the
//     unpickler indexes its stack without checking, and writes outside it for a damaged pickle;
//   - objects nest at most 1000 deep, as the unpickled value is destroyed recursively (a deeper
//     one would overflow the C++ stack), and no object gains items after it went inside another
//     (every pickler fills a container before adding it to its parent; adding to one through an
//     alias afterwards could deepen its ancestors unseen).
// An opcode it does not know, or a line argument without its newline, ends the walk; LibTorch
// refuses those. Throws TrainingError naming `source`, the opcode and its offset.
void check_pickle(std::string_view pickle, const std::string& source);

}  // namespace crucible::checkpoint
