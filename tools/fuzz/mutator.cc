#include "tools/fuzz/mutator.h"

#include <algorithm>
#include <cstring>

namespace mt {
namespace fuzz {
namespace {

constexpr uint8_t kBoundaryBytes[] = {0x00, 0x01, 0x7f, 0x80, 0xff, '"',  '\\', '\n', '{',
                                      '[',  '0',  '9',  ' ',  0xc0, 0xe2, 0xf0, 0xf4};
constexpr uint64_t kBoundaryInts[] = {0,
                                      1,
                                      2,
                                      0x7f,
                                      0xff,
                                      0x7fff,
                                      0xffff,
                                      0x7fffffffull,
                                      0x80000000ull,
                                      0xffffffffull,
                                      0x100000000ull,
                                      0x7fffffffffffffffull,
                                      0x8000000000000000ull,
                                      0xffffffffffffffffull};

void FlipBit(std::string* s, const std::vector<std::string>&, Rng* rng) {
  if (s->empty()) return;
  (*s)[rng->Below(s->size())] ^= static_cast<char>(1u << rng->Below(8));
}

void SetByte(std::string* s, const std::vector<std::string>&, Rng* rng) {
  if (s->empty()) return;
  (*s)[rng->Below(s->size())] =
      static_cast<char>(kBoundaryBytes[rng->Below(sizeof(kBoundaryBytes))]);
}

void SetInteger(std::string* s, const std::vector<std::string>&, Rng* rng) {
  const size_t width = size_t{2} << rng->Below(3);  // 2, 4 or 8 bytes
  if (s->size() < width) return;
  uint64_t v = kBoundaryInts[rng->Below(sizeof(kBoundaryInts) / sizeof(kBoundaryInts[0]))];
  if (rng->Below(4) == 0) v += rng->Below(3) - 1;  // a neighbour of the boundary
  const size_t at = rng->Below(s->size() - width + 1);
  for (size_t i = 0; i < width; ++i) (*s)[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

void InsertBytes(std::string* s, const std::vector<std::string>&, Rng* rng) {
  const size_t n = 1 + rng->Below(8);
  std::string bytes(n, '\0');
  for (char& c : bytes) {
    c = static_cast<char>(rng->Below(2) == 0 ? kBoundaryBytes[rng->Below(sizeof(kBoundaryBytes))]
                                             : rng->Below(256));
  }
  s->insert(rng->Below(s->size() + 1), bytes);
}

void EraseRange(std::string* s, const std::vector<std::string>&, Rng* rng) {
  if (s->empty()) return;
  const size_t at = rng->Below(s->size());
  s->erase(at, 1 + rng->Below(std::min<size_t>(s->size() - at, 16)));
}

void DuplicateRange(std::string* s, const std::vector<std::string>&, Rng* rng) {
  if (s->empty()) return;
  const size_t at = rng->Below(s->size());
  const std::string piece = s->substr(at, 1 + rng->Below(std::min<size_t>(s->size() - at, 32)));
  s->insert(rng->Below(s->size() + 1), piece);
}

void Splice(std::string* s, const std::vector<std::string>& seeds, Rng* rng) {
  const std::string& other = seeds[rng->Below(seeds.size())];
  const size_t keep = rng->Below(s->size() + 1);
  const size_t from = rng->Below(other.size() + 1);
  *s = s->substr(0, keep) + other.substr(from);
}

using Mutation = void (*)(std::string*, const std::vector<std::string>&, Rng*);
constexpr Mutation kMutations[] = {FlipBit,    SetByte,        SetInteger, InsertBytes,
                                   EraseRange, DuplicateRange, Splice};
constexpr size_t kNumMutations = sizeof(kMutations) / sizeof(kMutations[0]);

}  // namespace

uint64_t Rng::Next() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::string Mutate(const std::vector<std::string>& seeds, size_t max_size, Rng* rng) {
  std::string s = seeds[rng->Below(seeds.size())];
  const size_t mutations = 1 + rng->Below(4);
  for (size_t m = 0; m < mutations; ++m) {
    kMutations[rng->Below(kNumMutations)](&s, seeds, rng);
  }
  if (s.size() > max_size) s.resize(max_size);
  return s;
}

}  // namespace fuzz
}  // namespace mt
