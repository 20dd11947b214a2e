#include "pipeline/report/report.hpp"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "kernels/core/error.hpp"
#include "pipeline/report/report_data.hpp"

namespace bigtrain {
namespace {
namespace fs = std::filesystem;

TEST(Report, Base64MatchesRfc4648Vectors) {
  EXPECT_EQ(base64_encode(""), "");
  EXPECT_EQ(base64_encode("f"), "Zg==");
  EXPECT_EQ(base64_encode("fo"), "Zm8=");
  EXPECT_EQ(base64_encode("foo"), "Zm9v");
  EXPECT_EQ(base64_encode("foob"), "Zm9vYg==");
  EXPECT_EQ(base64_encode("fooba"), "Zm9vYmE=");
  EXPECT_EQ(base64_encode("foobar"), "Zm9vYmFy");
  EXPECT_EQ(base64_encode(std::string("\xff\x00\x80", 3)), "/wCA");
}

TEST(Report, EscapesMarkup) { EXPECT_EQ(html_escape("<a href=\"x\">&'"), "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"); }

TEST(Report, ChartPlacesPointsOnItsAxes) {
  const std::string svg = svg_line_chart("loss", "Loss", "epoch", "loss",
                                         {{"train", "#000", {{1, 1.0}, {2, 0.5}, {3, 0.0}}}});
  // Plot area x 62..388, y 28..198 (width 400, height 260, margins 62/12/28/62):
  // epoch 1 at the left edge with the largest loss at the top, epoch 3 bottom right.
  EXPECT_NE(svg.find("points=\"62.0,28.0 225.0,113.0 388.0,198.0 \""), std::string::npos) << svg;
  EXPECT_NE(svg.find("data-chart=\"loss\""), std::string::npos);
  EXPECT_NE(svg.find("data-series=\"train\""), std::string::npos);
}

TEST(Report, ChartLeavesOutMissingValuesAndSaysWhenEmpty) {
  const double nan = std::nan("");
  const std::string svg = svg_line_chart("auc", "AUC", "epoch", "auc", {{"val", "#000", {{1, nan}, {2, 0.5}}}});
  EXPECT_EQ(svg.find("nan"), std::string::npos) << svg;
  EXPECT_NE(svg_line_chart("x", "x", "e", "y", {}).find("no data yet"), std::string::npos);
}

TEST(Report, MetricsCsvErrorsNameTheLine) {
  EXPECT_THROW(parse_metrics_csv("epoch,split,loss\n1,train\n", "m.csv"), Error);
  try {
    parse_metrics_csv("epoch,split,loss\n1,train,0.5\nx,val,0.4\n", "m.csv");
    FAIL() << "a bad epoch must throw";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("m.csv:3"), std::string::npos) << error.what();
  }
  const auto table = parse_metrics_csv("epoch,split,loss,auc\n2,val,0.5,\n", "m.csv");
  ASSERT_EQ(table.rows.size(), 1u);
  EXPECT_EQ(table.rows[0].epoch, 2);
  EXPECT_DOUBLE_EQ(table.rows[0].value(table, "loss"), 0.5);
  EXPECT_TRUE(std::isnan(table.rows[0].value(table, "auc")));
}

TEST(Report, PageFromRunDirectoryFiles) {
  const fs::path dir = fs::temp_directory_path() / ("bigtrain_report_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "metrics.csv") << "epoch,split,loss,accuracy,images,tiles,seconds,lr\n"
                                        "1,train,0.9,0.5,4,40,1,0.1\n1,val,0.8,0.5,2,20,1,\n"
                                        "2,train,0.5,0.75,4,40,1,0.05\n2,val,0.6,1,2,20,1,\n";
  std::ofstream(dir / "confusion_val.csv") << "true\\predicted,cat,dog\ncat,1,0\ndog,0,1\n";
  std::ofstream(dir / "config.yaml") << "train:\n  note: <b>\n";
  Dataset dataset;
  dataset.classes = {"cat", "dog"};
  dataset.train = {{"a", 0, ""}, {"b", 1, ""}, {"c", 1, ""}};
  dataset.skipped = {{"train.csv:9", "missing file"}};
  const std::string path = write_run_report(dir.string(), &dataset);
  std::ifstream in(path);
  const std::string html((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(html.find("data-chart=\"loss\""), std::string::npos);
  EXPECT_NE(html.find("data-chart=\"accuracy\""), std::string::npos);
  EXPECT_NE(html.find("<table class=\"confusion\" data-split=\"val\">"), std::string::npos);
  EXPECT_NE(html.find("2 of 2 images correct"), std::string::npos);
  EXPECT_NE(html.find("note: &lt;b&gt;"), std::string::npos);  // the config, escaped
  EXPECT_NE(html.find("train.csv:9: missing file"), std::string::npos);
  EXPECT_NE(html.find("<td>10.0</td>"), std::string::npos);  // tiles per image
  EXPECT_NE(html.find("heatmaps-missing"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  const auto summary = parse_data_summary_json(data_summary_json(summarize_dataset(dataset)), "s");
  EXPECT_EQ(summary.images_per_class.at("train"), (std::vector<std::int64_t>{1, 2}));
  fs::remove_all(dir);
}

// A CUDA run's metrics.csv fills the device columns: the memory chart shows them; a
// CPU run's leaves them empty, and the chart has no device series.
TEST(Report, MemoryChartShowsTheDevicePeaksOfGpuRuns) {
  const fs::path dir = fs::temp_directory_path() / ("bigtrain_report_device_" + std::to_string(::getpid()));
  const std::string header =
      "epoch,split,loss,accuracy,images,tiles,seconds,peak_allocated_bytes,peak_rss_bytes,lr,"
      "device_peak_bytes,device_peak_reserved_bytes\n";
  for (const bool gpu : {true, false}) {
    fs::create_directories(dir);
    std::ofstream(dir / "metrics.csv") << header
                                       << (gpu ? "1,train,0.9,0.5,4,40,1,1048576,2097152,0.1,3145728,4194304\n"
                                                 "2,train,0.5,0.75,4,40,1,1048576,2097152,0.1,3145728,6291456\n"
                                               : "1,train,0.9,0.5,4,40,1,1048576,2097152,0.1,,\n"
                                                 "2,train,0.5,0.75,4,40,1,1048576,2097152,0.1,,\n");
    std::ifstream in(write_run_report(dir.string(), nullptr));
    const std::string html((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::size_t chart = html.find("data-chart=\"memory\"");
    ASSERT_NE(chart, std::string::npos);
    const std::string memory = html.substr(chart, html.find("</svg>", chart) - chart);
    EXPECT_NE(memory.find("train peak allocator"), std::string::npos) << memory;
    EXPECT_EQ(memory.find("train peak device") != std::string::npos, gpu) << memory;
    EXPECT_EQ(memory.find("train device reserved") != std::string::npos, gpu) << memory;
    fs::remove_all(dir);
  }
}

TEST(Report, TablePageMarksTheBestRowAndLinksRunReports) {
  TablePage page;
  page.title = "bigtrain compare";
  page.csv = "name,accuracy,run_dir\nwide,0.9,/runs/cmp/wide\nsmall,0.6,/runs/cmp/small\n";
  page.best_row = 0;
  page.page_dir = "/runs/cmp";
  const std::string html = render_table_report(page);
  const auto best = html.find("<tr class=\"best\">");
  ASSERT_NE(best, std::string::npos) << html;
  EXPECT_LT(best, html.find("<td>wide</td>"));
  EXPECT_GT(html.find("<td>small</td>"), html.find("</tr>", best));  // only the first data row is marked
  EXPECT_EQ(html.find("class=\"best\"", html.find("</tr>", best)), std::string::npos);
  EXPECT_NE(html.find("href=\"small/report.html\""), std::string::npos);
  EXPECT_NE(html.find("class=\"bar best\""), std::string::npos);
  page.csv.clear();
  EXPECT_THROW(render_table_report(page), Error);
}

}  // namespace
}  // namespace bigtrain
