// Philox4x32-10 against the published known-answer vectors (Random123's
// kat_vectors, the three philox4x32 10-round cases), and the stream mapping the
// dropout kernels rely on.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <set>

#include "kernels/core/philox.hpp"

namespace bigtrain::philox {
namespace {

struct KnownAnswer {
  Counter counter;
  Key key;
  Counter expected;
};

TEST(Philox, MatchesRandom123KnownAnswerVectors) {
  const KnownAnswer cases[] = {
      {{{0, 0, 0, 0}}, {{0, 0}}, {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}}},
      {{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}},
       {{0xffffffff, 0xffffffff}},
       {{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}}},
      {{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}},
       {{0xa4093822, 0x299f31d0}},
       {{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}}},
  };
  for (const KnownAnswer& c : cases) {
    const Counter got = philox4x32_10(c.counter, c.key);
    for (int lane = 0; lane < 4; ++lane)
      EXPECT_EQ(got.v[lane], c.expected.v[lane]) << "lane " << lane << " of counter " << std::hex << c.counter.v[0];
  }
}

TEST(Philox, UniformIsTheLaneOfItsBlock) {
  const std::uint64_t seed = 0x0123456789abcdefull;
  for (std::uint64_t index : {0ull, 1ull, 2ull, 3ull, 4ull, 4097ull, (1ull << 34) + 6}) {
    const Counter block = philox4x32_10(
        {{static_cast<std::uint32_t>(index >> 2), static_cast<std::uint32_t>(index >> 34), 0, 0}},
        {{0x89abcdefu, 0x01234567u}});
    EXPECT_EQ(uniform(seed, index), static_cast<float>(block.v[index % 4] >> 8) / 16777216.0f) << index;
  }
}

TEST(Philox, UnitFloatsStayBelowOne) {
  EXPECT_EQ(to_unit_float(0), 0.0f);
  EXPECT_LT(to_unit_float(0xffffffffu), 1.0f);
  EXPECT_EQ(to_unit_float(0x80000000u), 0.5f);
}

TEST(Philox, StreamsLookUniformAndDifferBySeed) {
  constexpr int kDraws = 200000;
  double sum = 0.0;
  int below_tenth = 0, equal_across_seeds = 0;
  std::set<float> distinct;
  for (int i = 0; i < kDraws; ++i) {
    const float u = uniform(7, static_cast<std::uint64_t>(i));
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    sum += u;
    below_tenth += u < 0.1f;
    equal_across_seeds += u == uniform(8, static_cast<std::uint64_t>(i));
    if (i < 1000) distinct.insert(u);
  }
  // Mean of n uniforms has standard deviation sqrt(1/12/n) = 6.5e-4; allow 5 sigma.
  EXPECT_NEAR(sum / kDraws, 0.5, 5 * std::sqrt(1.0 / 12.0 / kDraws));
  // Binomial(n, 0.1): sd = sqrt(n * 0.09) = 134; allow 5 sigma.
  EXPECT_NEAR(below_tenth, 0.1 * kDraws, 5 * std::sqrt(kDraws * 0.09));
  // Two independent 24-bit streams agree with probability 2^-24 per draw.
  EXPECT_LE(equal_across_seeds, 3);
  EXPECT_GE(distinct.size(), 990u);
}

}  // namespace
}  // namespace bigtrain::philox
