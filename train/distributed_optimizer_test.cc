// The distributed optimizer's partition arithmetic (PartitionBuckets): every element of the flat
// buffer is owned by exactly one rank, every rank's shard has the same size, buckets are
// multiples of the DP size (one padded remainder bucket at the front), and the bucket
// boundaries follow the all-reducing GradReducer's order (from the end), for odd sizes.
#include "train/distributed_optimizer.h"

#include <cstdint>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace mt {
namespace train {
namespace {

// Checks the layouts of all ranks of one (n, bucket, p) against the definition.
void CheckPartition(int64_t n, int64_t bucket, int p) {
  SCOPED_TRACE(testing::Message() << "n=" << n << " bucket=" << bucket << " p=" << p);
  std::vector<int> owners(n, 0);
  const ShardLayout first = PartitionBuckets(n, bucket, p, 0);
  const int64_t size = (bucket + p - 1) / p * p;
  for (int r = 0; r < p; ++r) {
    const ShardLayout l = PartitionBuckets(n, bucket, p, r);
    ASSERT_EQ(l.buckets.size(), first.buckets.size());
    EXPECT_EQ(l.shard_elements, first.shard_elements);
    int64_t expected_end = n, shard = 0;
    for (size_t k = 0; k < l.buckets.size(); ++k) {
      const ShardBucket& b = l.buckets[k];
      EXPECT_EQ(b.end, expected_end) << k;  // Contiguous, from the end of the buffer.
      expected_end = b.begin;
      EXPECT_EQ(b.begin, first.buckets[k].begin);
      const int64_t len = b.end - b.begin;
      EXPECT_GT(len, 0);
      EXPECT_LE(len, size);
      EXPECT_EQ(b.padded % p, 0);
      EXPECT_GE(b.padded, len);
      EXPECT_LT(b.padded - len, p);
      // Only the frontmost bucket, of n mod p elements, is padded.
      if (b.padded != len) {
        EXPECT_EQ(k + 1, l.buckets.size());
        EXPECT_EQ(b.begin, 0);
        EXPECT_EQ(len, n % p);
      }
      EXPECT_EQ(b.part_begin, b.begin + r * (b.padded / p));
      EXPECT_GE(b.part_end, b.part_begin);
      // A part of padding only is empty (part_end == part_begin, which may lie past the end).
      if (b.part_end > b.part_begin) {
        EXPECT_LE(b.part_end, b.end);
      }
      EXPECT_EQ(b.shard_offset, shard);
      shard += b.padded / p;
      for (int64_t i = b.part_begin; i < b.part_end; ++i) ++owners[i];
    }
    EXPECT_EQ(expected_end, 0);
    EXPECT_EQ(l.shard_elements, shard);
  }
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(owners[i], 1) << "element " << i;
  // The shard is the padded buffer over p: ceil(n / p) or a bucket's rounding more.
  EXPECT_GE(first.shard_elements * p, n);
  EXPECT_LT(first.shard_elements * p, n + p);
}

TEST(PartitionBucketsTest, EveryElementOwnedOnceAndShardsEqual) {
  for (int p : {1, 2, 3, 4, 7}) {
    for (int64_t n : {1, 2, 5, 97, 1000, 1001, 4099}) {
      for (int64_t bucket : {1, 3, 64, 100, 997, 1 << 22}) CheckPartition(n, bucket, p);
    }
  }
}

// A hand-computed case: 1001 elements, buckets of 100 -> 102 over 3 ranks.
TEST(PartitionBucketsTest, HandComputedOddSizes) {
  const ShardLayout l = PartitionBuckets(1001, 100, 3, 1);
  // 1001 mod 3 = 2: [2, 1001) is 999 = 9 x 102 + 81 elements, then [0, 2) padded to 3.
  ASSERT_EQ(l.buckets.size(), 11u);
  EXPECT_EQ(l.buckets[0].begin, 899);
  EXPECT_EQ(l.buckets[0].end, 1001);
  EXPECT_EQ(l.buckets[0].part_begin, 899 + 34);
  EXPECT_EQ(l.buckets[0].part_end, 899 + 68);
  EXPECT_EQ(l.buckets[9].begin, 2);
  EXPECT_EQ(l.buckets[9].end, 83);
  EXPECT_EQ(l.buckets[9].padded, 81);
  EXPECT_EQ(l.buckets[9].part_begin, 29);
  EXPECT_EQ(l.buckets[9].shard_offset, 9 * 34);
  EXPECT_EQ(l.buckets[10].begin, 0);
  EXPECT_EQ(l.buckets[10].end, 2);
  EXPECT_EQ(l.buckets[10].padded, 3);
  EXPECT_EQ(l.buckets[10].part_begin, 1);  // Rank 1 owns element 1; rank 2 owns padding.
  EXPECT_EQ(l.buckets[10].part_end, 2);
  EXPECT_EQ(l.shard_elements, 9 * 34 + 27 + 1);  // 334 = ceil(1001 / 3).
  const ShardLayout last = PartitionBuckets(1001, 100, 3, 2);
  EXPECT_EQ(last.buckets[10].part_begin, 2);
  EXPECT_EQ(last.buckets[10].part_end, 2);  // Padding only.
  EXPECT_EQ(last.shard_elements, 334);
}

// One rank: the GradReducer's buckets, unpadded, the whole buffer its shard.
TEST(PartitionBucketsTest, OneRankIsTheWholeBuffer) {
  const ShardLayout l = PartitionBuckets(10, 4, 1, 0);
  const std::vector<std::pair<int64_t, int64_t>> expected = {{6, 10}, {2, 6}, {0, 2}};
  EXPECT_EQ(l.Ranges(), expected);
  EXPECT_EQ(l.shard_elements, 10);
}

}  // namespace
}  // namespace train
}  // namespace mt
