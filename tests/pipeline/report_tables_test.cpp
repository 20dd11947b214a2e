// sweep.html / compare.html from their CSV, and the same table inside each run's
// own report.html with its row marked.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "kernels/core/error.hpp"
#include "pipeline/report/report.hpp"

namespace bigtrain {
namespace {
namespace fs = std::filesystem;

std::string read(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class ReportTables : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = fs::temp_directory_path() / ("bigtrain_report_tables_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    for (const char* run : {"tile64_overlap0", "tile32_overlap0"}) {
      fs::create_directories(dir / run);
      std::ofstream(dir / run / "metrics.csv") << "epoch,split,loss,accuracy\n1,train,0.9,0.5\n1,val,0.8,0.5\n";
    }
    // run_dir as the sweep wrote it, relative to the sweep's working directory.
    std::ofstream(dir / "sweep.csv") << "name,split,accuracy,tiles_per_image,run_dir\n"
                                        "tile64_overlap0,val,0.75,4.00,out/tile64_overlap0\n"
                                        "tile32_overlap0,val,0.50,16.00,out/tile32_overlap0\n";
  }
  void TearDown() override { fs::remove_all(dir); }
  fs::path dir;
};

TEST_F(ReportTables, SweepPageMarksTheFirstRowAndLinksRunsInItsFolder) {
  const std::string path = write_table_report(dir.string(), "sweep", "grid tiler.tile=32,64");
  EXPECT_EQ(fs::path(path), dir / "sweep.html");
  const std::string html = read(path);
  EXPECT_NE(html.find("<table class=\"runs\" data-table=\"sweep\">"), std::string::npos) << html;
  EXPECT_NE(html.find("<tr class=\"best\"><td>★ best</td><td>tile64_overlap0</td>"), std::string::npos);
  EXPECT_EQ(html.find("<tr class=\"best\">", html.find("tile32_overlap0</td>")), std::string::npos);
  // Links go to the run folders next to the page, whatever the working directory was.
  EXPECT_NE(html.find("href=\"tile32_overlap0/report.html\""), std::string::npos);
  EXPECT_NE(html.find("grid tiler.tile=32,64"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);
}

TEST_F(ReportTables, EachRunReportShowsTheTableWithItsOwnRowMarked) {
  write_table_report(dir.string(), "sweep");
  const std::string second = read(dir / "tile32_overlap0" / "report.html");
  EXPECT_NE(second.find("<h2 id=\"sweep\">sweep table: this run among 2</h2>"), std::string::npos) << second;
  EXPECT_NE(second.find("<tr class=\"this\"><td>this run</td><td>tile32_overlap0</td>"), std::string::npos);
  EXPECT_NE(second.find("<tr class=\"best\"><td>★ best</td><td>tile64_overlap0</td>"), std::string::npos);
  EXPECT_NE(second.find("href=\"../tile64_overlap0/report.html\""), std::string::npos);
  const std::string first = read(dir / "tile64_overlap0" / "report.html");
  EXPECT_NE(first.find("<tr class=\"best this\"><td>★ best · this run</td><td>tile64_overlap0</td>"), std::string::npos);
}

TEST_F(ReportTables, ARunTheTableDoesNotListShowsNoTable) {
  fs::create_directories(dir / "other");
  std::ofstream(dir / "other" / "metrics.csv") << "epoch,split,loss,accuracy\n1,train,0.9,0.5\n";
  EXPECT_EQ(read(write_run_report((dir / "other").string())).find("id=\"sweep\""), std::string::npos);
}

TEST_F(ReportTables, MissingTableIsAnErrorNamingTheFolder) {
  try {
    write_table_report(dir.string(), "compare");
    FAIL() << "no compare.csv must throw";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("compare.csv"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace bigtrain
