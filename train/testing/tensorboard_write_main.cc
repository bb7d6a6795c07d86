// Writes the scalars of //train:tensorboard_decode_test into a new event file in the directory it
// is given, and prints the file's path. The test holds the same list and compares it with what
// tools/tfevents_decode.py reads back:
//   tensorboard_write DIR
#include <cstdint>
#include <iostream>
#include <limits>

#include "train/tensorboard.h"

namespace {

struct Scalar {
  const char* tag;
  double value;
  int64_t step;
};

constexpr double kInf = std::numeric_limits<double>::infinity();

// Tags as Megatron spells them (with spaces; "iteration-time", whose bytes happen to parse as a
// protobuf message), a non-ASCII one and an empty one; values exact in float32 and not (0.1,
// 1.5e-4, 1e40: rounded, or beyond float's range), NaN and infinities; steps from 0 to one past
// 2^32 (a five-byte varint) and a negative one (ten bytes).
constexpr Scalar kScalars[] = {
    {"lm loss", 10.8125, 1},
    {"lm loss vs samples", 10.8125, 32},
    {"learning-rate", 1.5e-4, 1},
    {"iteration-time", 0.1, 1},
    {"lm loss", 9.5, 2},
    {"lm loss vs samples", 9.5, 64},
    {"grad-norm", std::numeric_limits<double>::quiet_NaN(), 2},
    {"loss-scale", kInf, 2},
    {"loss-scale", -kInf, 3},
    {"num-zeros", 1e40, 3},
    {"validation ppl (\xce\xbc)", 123456.789, 4294967297},
    {"", -0.0, 0},
    {"negative step", 1, -5},
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: tensorboard_write DIR\n";
    return 2;
  }
  auto writer = mt::train::EventFileWriter::Open(argv[1]);
  if (!writer.ok()) {
    std::cerr << writer.status() << "\n";
    return 1;
  }
  for (const Scalar& s : kScalars) {
    const absl::Status added = (*writer)->AddScalar(s.tag, s.value, s.step);
    if (!added.ok()) {
      std::cerr << added << "\n";
      return 1;
    }
  }
  const absl::Status flushed = (*writer)->Flush();
  if (!flushed.ok()) {
    std::cerr << flushed << "\n";
    return 1;
  }
  std::cout << (*writer)->path() << "\n";
  return 0;
}
