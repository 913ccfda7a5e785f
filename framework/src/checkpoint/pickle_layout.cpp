#include "checkpoint/pickle_layout.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include <c10/util/Exception.h>
#include <fmt/format.h>

#include <crucible/errors.h>

#include "util/parse.h"

namespace crucible::checkpoint {
namespace {

// What follows an opcode: a fixed number of bytes (kFixed, `width` of them), a little-endian
// length of `width` bytes and that many bytes (kSized; a FRAME's bytes are opcodes, walked on),
// or `width` newline-ended lines (kLines).
enum class Argument { kUnknown, kFixed, kSized, kFrame, kLines };

// What an opcode does to the stack: takes `pops` items above the innermost mark and leaves
// `pushes`; kMark pushes a mark; kToMark takes every item above the innermost mark and that mark,
// then leaves `pushes` (kAddToMark: adds the items to the object below the mark).
enum class Marks { kNone, kMark, kToMark, kAddToMark };

struct Opcode {
  Argument argument = Argument::kUnknown;
  int width = 0;
  Marks marks = Marks::kNone;
  int pops = 0;
  int pushes = 0;
};

// Every opcode of pickle protocols 0 to 5 by its byte; kUnknown for the other bytes.
const std::array<Opcode, 256>& opcodes() {
  static const std::array<Opcode, 256> table = [] {
    std::array<Opcode, 256> t{};
    const auto argument = [&](std::string_view ops, Argument a, int width) {
      for (const char op : ops) t[static_cast<unsigned char>(op)].argument = a;
      for (const char op : ops) t[static_cast<unsigned char>(op)].width = width;
    };
    argument("(012NR]abd}el)stuoQ\x81\x85\x86\x87\x88\x89\x8f\x90\x91\x92\x93\x94\x97\x98.",
             Argument::kFixed, 0);
    argument("Khq\x80\x82", Argument::kFixed, 1);
    argument("M\x83", Argument::kFixed, 2);
    argument("Jjr\x84", Argument::kFixed, 4);
    argument("G", Argument::kFixed, 8);
    argument("UC\x8c\x8a", Argument::kSized, 1);    // SHORT_BINSTRING, ..., LONG1
    argument("XBT\x8b", Argument::kSized, 4);       // BINUNICODE, BINBYTES, BINSTRING, LONG4
    argument("\x8d\x8e\x96", Argument::kSized, 8);  // BINUNICODE8, BINBYTES8, BYTEARRAY8
    argument("\x95", Argument::kFrame, 8);
    argument("ILSVFgpP", Argument::kLines, 1);
    argument("ci", Argument::kLines, 2);  // GLOBAL, INST: module and name
    const auto stack = [&](std::string_view ops, Marks marks, int pops, int pushes) {
      for (const char op : ops) {
        Opcode& o = t[static_cast<unsigned char>(op)];
        o.marks = marks;
        o.pops = pops;
        o.pushes = pushes;
      }
    };
    stack("N]})\x88\x89KMJGXBTUC\x8c\x8d\x8e\x96\x8a\x8bILSVFghjcP\x82\x83\x84\x8f\x97",
          Marks::kNone, 0, 1);
    stack("pqr\x94Q\x85\x98.", Marks::kNone, 1, 1);  // STOP needs the result
    stack("2", Marks::kNone, 1, 2);
    stack("0", Marks::kNone, 1, 0);
    stack("Rba\x86\x81\x93", Marks::kNone, 2, 1);
    stack("s\x87\x92", Marks::kNone, 3, 1);
    stack("(", Marks::kMark, 0, 0);
    stack("1", Marks::kToMark, 0, 0);
    stack("tld\x91i", Marks::kToMark, 0, 1);
    stack("o", Marks::kToMark, 1, 1);  // OBJ: the class, then its arguments
    stack("eu\x90", Marks::kAddToMark, 0, 0);
    return t;
  }();
  return table;
}

// Deeper than any state dict nests (a dict of tensors is about 4 deep).
constexpr uint32_t kMaxDepth = 1000;

}  // namespace

void check_pickle(std::string_view pickle, const std::string& source) {
  uint64_t height = 0;          // the stack's items, marks not counted
  std::vector<uint64_t> marks;  // the height at each mark, innermost last
  // How deeply objects nest (an unpickled value is destroyed recursively, so a deep one would
  // overflow the C++ stack): the object of each stack item and memo entry (DUP, PUT and GET share
  // one), its depth, and whether it is inside another yet. An object only gains items before it
  // goes inside another (as every pickler writes them): then each object's depth is final when a
  // container takes it, and an alias cannot deepen a container after the fact.
  struct Object {
    uint32_t depth = 1;
    bool inside = false;
  };
  std::vector<Object> objects;
  std::vector<uint64_t> stack;  // the object of each item
  std::unordered_map<uint64_t, uint64_t> memo;
  uint64_t memoized = 0;  // MEMOIZE's next index
  const auto fresh = [&](uint32_t depth) {
    objects.push_back({depth, false});
    return static_cast<uint64_t>(objects.size() - 1);
  };
  uint64_t at = 0;
  while (at < pickle.size()) {
    const uint64_t start = at;
    const auto op = static_cast<unsigned char>(pickle[at]);
    const Opcode code = opcodes()[op];
    if (code.argument == Argument::kUnknown) return;
    const uint64_t left = pickle.size() - at - 1;
    const auto damaged = [&](const std::string& what) {
      throw TrainingError(fmt::format("{}: a damaged pickle: opcode 0x{:02x} at offset {} {}",
                                      source, op, start, what));
    };
    const auto too_long = [&](uint64_t length) {
      damaged(fmt::format("declares {} bytes, {} follow", length,
                          left < uint64_t(code.width) ? 0 : left - code.width));
    };
    const auto check_memo = [&](uint64_t index) {
      if (index >= pickle.size()) {
        damaged(fmt::format("stores memo entry {} in a pickle of {} bytes", index, pickle.size()));
      }
    };

    // Its argument.
    if (code.argument != Argument::kLines && left < uint64_t(code.width)) too_long(code.width);
    uint64_t value = 0;  // the little-endian number after the opcode, for kFixed and kSized
    if (code.argument != Argument::kLines) {
      for (int i = code.width - 1; i >= 0; --i) {
        value = (value << 8) | static_cast<unsigned char>(pickle[at + 1 + i]);
      }
    }
    switch (code.argument) {
      case Argument::kUnknown:
        return;
      case Argument::kFixed:
        if (op == 'r') check_memo(value);  // LONG_BINPUT
        at += 1 + code.width;
        break;
      case Argument::kSized:
      case Argument::kFrame:
        if (value > left - code.width) too_long(value);
        at += 1 + code.width + (code.argument == Argument::kSized ? value : 0);
        break;
      case Argument::kLines:
        ++at;
        for (int line = 0; line < code.width; ++line) {
          const size_t newline = pickle.find('\n', at);
          if (newline == std::string_view::npos) return;
          if (op == 'p' || op == 'g') {  // PUT, GET: the index in decimal
            const auto index = util::whole_integer(std::string(pickle.substr(at, newline - at)));
            if (index && *index >= 0) {
              value = static_cast<uint64_t>(*index);
              if (op == 'p') check_memo(value);
            }
          }
          at = newline + 1;
        }
        break;
    }

    // Its stack effect, checked, then applied to the objects.
    const uint64_t above_mark = height - (marks.empty() ? 0 : marks.back());
    const uint64_t base = code.marks == Marks::kNone
                              ? height - std::min<uint64_t>(height, code.pops)
                          : code.marks == Marks::kMark || marks.empty() ? height
                                                                        : marks.back();
    switch (code.marks) {
      case Marks::kMark:
        marks.push_back(height);
        break;
      case Marks::kToMark:
      case Marks::kAddToMark:
        if (marks.empty()) damaged("takes the items up to a mark, and there is none");
        if (above_mark < uint64_t(code.pops)) damaged("takes an item above the mark, and none is");
        height = marks.back();
        marks.pop_back();
        if (code.marks == Marks::kAddToMark && height == (marks.empty() ? 0 : marks.back())) {
          damaged("adds items to an object below the mark, and there is none");
        }
        height += code.pushes;
        break;
      case Marks::kNone:
        if (above_mark < uint64_t(code.pops)) {
          damaged(
              fmt::format("takes {} stack items, {} are above the mark", code.pops, above_mark));
        }
        height = height - code.pops + code.pushes;
        break;
    }
    // Its effect on the objects. The items taken are those from `base` up; APPEND, SETITEM and
    // BUILD take the object they add to first, the opcodes that add up to a mark the one below
    // the mark.
    const bool memo_put = op == 'p' || op == 'q' || op == 'r' || op == 0x94;
    const bool memo_get = op == 'h' || op == 'j' || op == 'g';
    const bool adds = op == 'a' || op == 's' || op == 'b' || code.marks == Marks::kAddToMark;
    const uint64_t first_item = op == 'a' || op == 's' || op == 'b' ? base + 1 : base;
    const uint64_t top = stack.empty() ? 0 : stack.back();
    // Whether the items taken go inside what it adds to or builds (not so for PUT, GET, DUP, POP
    // and POP_MARK).
    const bool contains = adds || (code.pushes == 1 && !memo_put && !memo_get);
    if (adds && objects[stack[first_item - 1]].inside) {
      damaged("adds items to an object already inside another");
    }
    uint32_t deepest = 0;
    for (uint64_t i = first_item; contains && i < stack.size(); ++i) {
      deepest = std::max(deepest, objects[stack[i]].depth);
      objects[stack[i]].inside = true;
    }
    uint64_t result = 0;
    if (adds) {
      const uint64_t target = stack[first_item - 1];
      objects[target].depth = std::max(objects[target].depth, deepest + 1);
      result = target;
      stack.resize(first_item);
    } else if (memo_put || op == '2') {  // the same object stays (DUP: twice)
      result = top;
      if (op == '2') stack.push_back(top);
    } else {
      stack.resize(base);
      if (memo_get) {
        const auto found = memo.find(value);
        if (found != memo.end()) {
          stack.push_back(found->second);
        } else {
          stack.push_back(fresh(1));
        }
      } else if (code.pushes == 1) {
        stack.push_back(fresh(deepest + 1));
      }
      result = stack.empty() ? 0 : stack.back();
    }
    if (memo_put) memo[op == 0x94 ? memoized++ : value] = top;
    TORCH_INTERNAL_ASSERT(stack.size() == height, "pickle object bookkeeping out of step");
    if (!stack.empty() && objects[result].depth > kMaxDepth) {
      damaged(fmt::format("nests objects more than {} deep", kMaxDepth));
    }
    if (op == '.') return;  // STOP
  }
}

}  // namespace crucible::checkpoint
