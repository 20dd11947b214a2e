// What `mpirun bigtrain infer` sends from every rank to rank 0 (pipeline/infer_shard):
// reports survive the byte form exactly (any bytes in paths and messages), damaged
// bytes are refused with an error, and one process's gather is its own reports in
// input order. (tests/cli/mpi_infer.sh runs the gather across 2 ranks.)
#include <gtest/gtest.h>

#include "kernels/core/error.hpp"
#include "pipeline/infer/infer_shard.hpp"

namespace bigtrain {
namespace {

std::vector<ItemReport> sample_reports() {
  return {{7, "{\"path\": \"a.tif\"}\n", {}},
          {2, "", {"b.tif: cannot open", std::string("odd \0 bytes \xff", 13)}},
          {0, "c.tif: 3 (0.9000)\n", {"c.tif: writing its outputs failed: disk full"}}};
}

TEST(InferShard, ReportsRoundTripThroughBytes) {
  const auto reports = sample_reports();
  const auto back = deserialize_reports(serialize_reports(reports));
  ASSERT_EQ(back.size(), reports.size());
  for (std::size_t i = 0; i < reports.size(); ++i) {
    EXPECT_EQ(back[i].index, reports[i].index);
    EXPECT_EQ(back[i].out, reports[i].out);
    EXPECT_EQ(back[i].errors, reports[i].errors);
  }
  EXPECT_TRUE(deserialize_reports("").empty());
}

TEST(InferShard, TruncatedBytesAreAnError) {
  const std::string bytes = serialize_reports(sample_reports());
  for (std::size_t cut : {std::size_t{1}, std::size_t{8}, bytes.size() / 2, bytes.size() - 1})
    EXPECT_THROW(deserialize_reports(bytes.substr(0, cut)), Error) << "cut at " << cut;
}

TEST(InferShard, OneProcessGathersItsOwnReportsInInputOrder) {
  auto comm = make_single_process_communicator();
  const auto all = gather_reports(*comm, sample_reports());
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].index, 0u);
  EXPECT_EQ(all[1].index, 2u);
  EXPECT_EQ(all[2].index, 7u);
  EXPECT_EQ(all[2].out, "{\"path\": \"a.tif\"}\n");
}

}  // namespace
}  // namespace bigtrain
