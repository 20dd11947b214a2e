#pragma once
// `bigtrain infer` under mpirun: each rank classifies a disjoint share of the images
// (round robin, shard_indices) and rank 0 prints every image's output in input
// order, as one process would. Outputs are kept as text until then: an image's
// result line and its error messages are small, while its heatmap and tile CSV are
// written by the rank that classified it (a shared file system is assumed, as for
// the checkpoint every rank reads).
#include <cstddef>
#include <string>
#include <vector>

#include "pipeline/distributed/distributed.hpp"

namespace bigtrain {

// What one image printed: its stdout text (result or --json line) and the messages
// it logged as errors (failed read, failed heatmap), in the order they happened.
struct ItemReport {
  std::size_t index = 0;  // in the command's input order
  std::string out;
  std::vector<std::string> errors;
};

// Every rank's reports on rank 0, sorted by index (an empty vector on the others).
// A collective: every rank calls it once, with its own reports.
std::vector<ItemReport> gather_reports(Communicator& comm, const std::vector<ItemReport>& mine);

// The byte form gather_reports sends (exposed for its test).
std::string serialize_reports(const std::vector<ItemReport>& reports);
// Throws Error when `bytes` is not what serialize_reports wrote.
std::vector<ItemReport> deserialize_reports(const std::string& bytes);

}  // namespace bigtrain
