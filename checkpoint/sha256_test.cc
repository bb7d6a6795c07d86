#include "checkpoint/sha256.h"

#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint_testutil.h"
#include "checkpoint/digest_workers.h"
#include "core/crc32c.h"
#include "gtest/gtest.h"

namespace mt {
namespace checkpoint {
namespace {

// The examples of FIPS 180-4's companion document (NIST "SHA256.pdf", and the long-message test
// of FIPS 180-2 appendix B.3), whose digests are published there.
TEST(Sha256Test, PublishedVectors) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  // 448 bits: the padding needs a second block.
  EXPECT_EQ(Sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  // 896 bits.
  EXPECT_EQ(
      Sha256Hex("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnop"
                "qklmnopqrlmnopqrsmnopqrstnopqrstu"),
      "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  EXPECT_EQ(Sha256Hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// The million 'a's fed in uneven pieces: the streaming state carries across every boundary.
TEST(Sha256Test, StreamingEqualsOneShot) {
  const std::string a(1000000, 'a');
  Sha256 h;
  size_t done = 0;
  for (size_t piece = 0; done < a.size(); piece = (piece * 7 + 3) % 131) {
    const size_t n = std::min(piece, a.size() - done);
    h.Update(a.data() + done, n);
    done += n;
  }
  EXPECT_EQ(DigestHex(h.Finish()),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  // Reset by assigning a new object, as the header says.
  h = Sha256();
  h.Update("abc");
  EXPECT_EQ(DigestHex(h.Finish()),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  Sha256 empty;
  empty.Update(nullptr, 0);
  EXPECT_EQ(DigestHex(empty.Finish()), Sha256Hex(""));
}

// Random bytes of every length 0..200 (every padding case: the length field in the same block or
// the next, at and around the 55/56/64-byte boundaries, several blocks), against sha256sum.
TEST(Sha256Test, RandomLengthsMatchSha256sum) {
  std::mt19937 rng(20261201);
  std::vector<std::string> inputs, paths;
  for (int len = 0; len <= 200; ++len) {
    std::string bytes(len, '\0');
    for (char& c : bytes) c = static_cast<char>(rng() & 0xff);
    const std::string path = absl::StrCat(::testing::TempDir(), "/sha256_input_", len);
    std::ofstream(path, std::ios::binary).write(bytes.data(), len);
    inputs.push_back(bytes);
    paths.push_back(path);
  }
  const std::map<std::string, std::string> expected = testing::Sha256sum(paths);
  ASSERT_EQ(expected.size(), inputs.size());
  for (size_t len = 0; len < inputs.size(); ++len) {
    EXPECT_EQ(Sha256Hex(inputs[len]), expected.at(paths[len])) << "length " << len;
    EXPECT_TRUE(IsSha256Hex(expected.at(paths[len])));
  }

  // The same inputs digested by three workers while the bytes are reported ready in uneven pieces
  // (as a reader reports what it has read), and with everything ready at once (as a writer):
  // SHA-256 and CRC32C together (as a save), and each alone (as a load checks one of them).
  for (const auto& [sha256, crc32c] : {std::pair{true, true}, {true, false}, {false, true}}) {
    std::vector<DigestWorkers::Buffer> buffers;
    for (const std::string& in : inputs) buffers.push_back({in.data(), in.size(), sha256, crc32c});
    for (bool piecewise : {true, false}) {
      DigestWorkers workers(buffers, 3);
      if (piecewise) {
        for (size_t i = 0; i < inputs.size(); ++i) {
          for (size_t bytes = 0; bytes < inputs[i].size(); bytes += 1 + bytes % 37) {
            workers.MarkReady(i, bytes);
          }
        }
      }
      workers.MarkAllReady();
      const std::vector<TensorDigests> digests = workers.Finish();
      ASSERT_EQ(digests.size(), inputs.size());
      for (size_t len = 0; len < inputs.size(); ++len) {
        EXPECT_EQ(digests[len].sha256, sha256 ? expected.at(paths[len]) : "") << "length " << len;
        const uint32_t crc = Crc32c(inputs[len].data(), inputs[len].size());
        EXPECT_EQ(digests[len].crc32c, crc32c ? crc : 0u) << "length " << len;
      }
    }
  }
  // Both digests of a buffer several pieces long, fed in pieces that straddle them.
  std::string big(3 * DigestWorkers::kPiece + 12345, '\0');
  std::mt19937 big_rng(3);
  for (char& c : big) c = static_cast<char>(big_rng());
  const TensorDigests whole = Digest(big.data(), big.size(), true, true);
  EXPECT_EQ(whole.sha256, Sha256Hex(big));
  EXPECT_EQ(whole.crc32c, Crc32c(big.data(), big.size()));
  DigestWorkers workers({{big.data(), big.size(), true, true}}, 2);
  for (size_t bytes = 0; bytes < big.size(); bytes += 100003) workers.MarkReady(0, bytes);
  workers.MarkAllReady();
  const std::vector<TensorDigests> pieces = workers.Finish();
  EXPECT_EQ(pieces[0].sha256, whole.sha256);
  EXPECT_EQ(pieces[0].crc32c, whole.crc32c);
  // Abandoned half way (a failed read): the destructor stops the waiting workers.
  std::vector<DigestWorkers::Buffer> buffers;
  for (const std::string& in : inputs) buffers.push_back({in.data(), in.size(), true, true});
  DigestWorkers abandoned(buffers, 2);
  abandoned.MarkReady(100, 50);
}

TEST(Sha256Test, IsSha256Hex) {
  EXPECT_TRUE(IsSha256Hex(Sha256Hex("x")));
  EXPECT_FALSE(IsSha256Hex(""));
  EXPECT_FALSE(IsSha256Hex(std::string(63, 'a')));
  EXPECT_FALSE(IsSha256Hex(std::string(65, 'a')));
  EXPECT_FALSE(IsSha256Hex(std::string(64, 'A')));  // Uppercase is not what we write.
  EXPECT_FALSE(IsSha256Hex(std::string(63, '0') + "g"));
}

}  // namespace
}  // namespace checkpoint
}  // namespace mt
