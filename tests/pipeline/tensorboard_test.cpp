#include "pipeline/report/tensorboard.hpp"

#include <cstring>

#include <gtest/gtest.h>

namespace bigtrain {
namespace {

TEST(Tensorboard, Crc32cMatchesPublishedCheckValues) {
  // RFC 3720 (iSCSI) B.4 and the CRC catalogue's check value for "123456789".
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(crc32c(std::string(32, '\xff')), 0x62A8AB43u);
  EXPECT_EQ(crc32c(""), 0u);
}

TEST(Tensorboard, MaskRotatesAndAddsTheConstant) {
  const std::uint32_t crc = crc32c("abc");
  EXPECT_EQ(masked_crc32c("abc"), ((crc >> 15) | (crc << 17)) + 0xa282ead8u);
}

TEST(Tensorboard, ScalarEventHasTensorflowsFieldNumbers) {
  const std::string event = encode_scalar_event(1.5, 300, {{"val/loss", 0.25f}});
  std::string expected;
  expected += '\x09';  // field 1, fixed64: wall_time
  double wall = 1.5;
  expected.append(reinterpret_cast<const char*>(&wall), 8);  // little-endian host (x86-64, aarch64)
  expected += "\x10\xac\x02";  // field 2, varint: step 300
  expected += '\x2a';          // field 5, length-delimited: summary
  expected += '\x11';          // summary length 17
  expected += '\x0a';          // Summary.value (field 1)
  expected += '\x0f';          // value length 15
  expected += '\x0a';          // Value.tag (field 1)
  expected += '\x08';
  expected += "val/loss";
  expected += '\x15';  // Value.simple_value (field 2, fixed32)
  float value = 0.25f;
  expected.append(reinterpret_cast<const char*>(&value), 4);
  EXPECT_EQ(event, expected);
}

TEST(Tensorboard, RecordFramingCarriesLengthAndBothChecksums) {
  const std::string data = encode_file_version_event(10.0);
  const std::string record = tfrecord(data);
  ASSERT_EQ(record.size(), data.size() + 16);
  std::uint64_t length = 0;
  std::memcpy(&length, record.data(), 8);
  EXPECT_EQ(length, data.size());
  std::uint32_t length_crc = 0, data_crc = 0;
  std::memcpy(&length_crc, record.data() + 8, 4);
  std::memcpy(&data_crc, record.data() + 12 + data.size(), 4);
  EXPECT_EQ(length_crc, masked_crc32c(record.substr(0, 8)));
  EXPECT_EQ(data_crc, masked_crc32c(data));
  EXPECT_NE(record.find("brain.Event:2"), std::string::npos);
}

TEST(Tensorboard, OneEventPerMetricsRowWithEveryNumericColumn) {
  const std::string csv =
      "epoch,split,loss,auc,seconds\n"
      "1,train,0.7,,2.0\n"
      "1,val,0.6,0.8,1.0\n";
  const std::string file = tensorboard_events_from_metrics_csv(csv, 1000.0);
  const std::string header = tfrecord(encode_file_version_event(1000.0));
  const std::string train = tfrecord(encode_scalar_event(1002.0, 1, {{"train/loss", 0.7f}, {"train/seconds", 2.0f}}));
  const std::string val = tfrecord(
      encode_scalar_event(1003.0, 1, {{"val/loss", 0.6f}, {"val/auc", 0.8f}, {"val/seconds", 1.0f}}));
  EXPECT_EQ(file, header + train + val);  // the empty auc cell of the train row is left out
}

}  // namespace
}  // namespace bigtrain
