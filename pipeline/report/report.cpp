#include "pipeline/report/report.hpp"

#include <algorithm>
#include <array>
#include <ctime>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <sstream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "kernels/core/error.hpp"
#include "pipeline/common/atomic_file.hpp"
#include "pipeline/report/heatmap_manifest.hpp"
#include "pipeline/report/report_data.hpp"
#include "pipeline/report/tensorboard.hpp"

namespace bigtrain {
namespace fs = std::filesystem;
namespace {

constexpr const char* kTrainColour = "#1f77b4";
constexpr const char* kValColour = "#d62728";
constexpr const char* kTestColour = "#2ca02c";
constexpr const char* kExtraColour = "#9467bd";

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("{}: cannot read", path.string()));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Tick spacing of 1, 2 or 5 times a power of ten giving about `count` ticks.
double nice_step(double range, int count) {
  if (!(range > 0)) return 1.0;
  const double raw = range / count;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  const double fraction = raw / power;
  return (fraction < 1.5 ? 1.0 : fraction < 3.5 ? 2.0 : fraction < 7.5 ? 5.0 : 10.0) * power;
}

std::string tick_label(double value, double step) {
  if (std::abs(value) >= 1e5 || (value != 0 && std::abs(value) < 1e-3)) return fmt::format("{:.2g}", value);
  const int decimals = std::max(0, static_cast<int>(-std::floor(std::log10(step) + 1e-9)));
  return fmt::format("{:.{}f}", value, decimals);
}

// One series per split for a metrics column.
std::vector<ChartSeries> split_series(const MetricsTable& table, const std::string& column,
                                      const std::vector<std::string>& splits, const std::string& suffix = "",
                                      double scale = 1.0) {
  std::vector<ChartSeries> series;
  for (const auto& split : splits) {
    ChartSeries s{split + suffix, split == "train" ? kTrainColour : split == "val" ? kValColour : kTestColour, {}};
    for (const auto& row : table.rows)
      if (row.split == split) s.points.emplace_back(static_cast<double>(row.epoch), row.value(table, column) * scale);
    if (std::any_of(s.points.begin(), s.points.end(), [](const auto& p) { return std::isfinite(p.second); }))
      series.push_back(std::move(s));
  }
  return series;
}

std::string confusion_table(const ConfusionMatrix& matrix, const std::string& split) {
  std::int64_t largest = 1, total = 0, correct = 0;
  for (std::size_t t = 0; t < matrix.counts.size(); ++t)
    for (std::size_t p = 0; p < matrix.counts[t].size(); ++p) {
      largest = std::max(largest, matrix.counts[t][p]);
      total += matrix.counts[t][p];
      if (t == p) correct += matrix.counts[t][p];
    }
  std::string html = fmt::format(
      "<table class=\"confusion\" data-split=\"{}\"><caption>{} split: {} of {} images correct</caption>"
      "<tr><th>true \\ predicted</th>",
      split, split, correct, total);
  for (const auto& name : matrix.classes) html += "<th>" + html_escape(name) + "</th>";
  html += "</tr>";
  for (std::size_t t = 0; t < matrix.counts.size(); ++t) {
    html += "<tr><th>" + html_escape(t < matrix.classes.size() ? matrix.classes[t] : std::to_string(t)) + "</th>";
    for (std::size_t p = 0; p < matrix.counts[t].size(); ++p) {
      const double shade = static_cast<double>(matrix.counts[t][p]) / static_cast<double>(largest);
      // Diagonal cells in green and errors in red, darker for larger counts.
      const std::string colour = t == p ? fmt::format("rgba(44,160,44,{:.2f})", 0.1 + 0.8 * shade)
                                        : fmt::format("rgba(214,39,40,{:.2f})", matrix.counts[t][p] ? 0.1 + 0.8 * shade : 0.0);
      html += fmt::format("<td style=\"background:{}\">{}</td>", colour, matrix.counts[t][p]);
    }
    html += "</tr>";
  }
  return html + "</table>";
}

std::string data_summary_html(const fs::path& run_dir, const MetricsTable& metrics) {
  std::string html = "<h2 id=\"data\">Data</h2>";
  const fs::path path = run_dir / "data_summary.json";
  if (fs::exists(path)) {
    const DataSummary summary = parse_data_summary_json(read_text(path), path.string());
    html += "<table class=\"data\"><tr><th>class</th>";
    const std::vector<std::string> splits = {"train", "val", "test"};
    for (const auto& split : splits) html += "<th>" + split + " images</th>";
    html += "</tr>";
    for (std::size_t c = 0; c < summary.classes.size(); ++c) {
      html += "<tr><th>" + html_escape(summary.classes[c]) + "</th>";
      for (const auto& split : splits) {
        const auto found = summary.images_per_class.find(split);
        const bool has = found != summary.images_per_class.end() && c < found->second.size();
        html += fmt::format("<td>{}</td>", has ? std::to_string(found->second[c]) : std::string("–"));
      }
      html += "</tr>";
    }
    html += "</table>";
    html += fmt::format("<p>Skipped images: {}</p>", summary.skipped.size());
    if (!summary.skipped.empty()) {
      html += "<ul class=\"skipped\">";
      for (const auto& s : summary.skipped) html += "<li>" + html_escape(s.origin) + ": " + html_escape(s.reason) + "</li>";
      html += "</ul>";
    }
  } else {
    html += "<p class=\"missing\">No data_summary.json in this run directory (written by the trainer at the end of "
            "each epoch).</p>";
  }
  // Tiles per image from the last row of each split: tiles actually streamed (after
  // background filtering and max_tiles_per_image) over the images of that pass.
  std::map<std::string, const MetricsRow*> last;
  for (const auto& row : metrics.rows) last[row.split] = &row;
  html += "<table class=\"tiles\"><tr><th>split</th><th>epoch</th><th>images</th><th>tiles</th><th>tiles per image</th></tr>";
  for (const auto& [split, row] : last) {
    const double images = row->value(metrics, "images"), tiles = row->value(metrics, "tiles");
    html += fmt::format("<tr><th>{}</th><td>{}</td><td>{}</td><td>{}</td><td>{:.1f}</td></tr>", html_escape(split),
                        row->epoch, images, tiles, images > 0 ? tiles / images : 0.0);
  }
  return html + "</table>";
}

std::string heatmap_figure(const fs::path& png, const std::string& outcome, const std::string& caption) {
  return fmt::format("<figure data-outcome=\"{}\"><img alt=\"{}\" src=\"data:image/png;base64,{}\">"
                     "<figcaption>{}</figcaption></figure>",
                     outcome, html_escape(png.filename().string()), base64_encode(read_text(png)), caption);
}

// The trainer's correct and wrong validation images (report_heatmaps.json), then any
// other PNG someone put in RUN_DIR/heatmaps/ (e.g. `bigtrain infer --heatmap`).
std::string heatmaps_html(const fs::path& run_dir) {
  std::string html = "<h2 id=\"heatmaps\">Heatmaps</h2>";
  const fs::path dir = run_dir / "heatmaps";
  std::vector<fs::path> pngs;
  if (fs::is_directory(dir))
    for (const auto& entry : fs::directory_iterator(dir))
      if (entry.path().extension() == ".png") pngs.push_back(entry.path());
  std::sort(pngs.begin(), pngs.end());
  std::vector<std::string> listed;
  const fs::path manifest = dir / kReportHeatmapsManifest;
  ReportHeatmapSet set;
  bool have_set = false;
  if (fs::exists(manifest)) {
    try {
      set = parse_report_heatmaps_json(read_text(manifest), manifest.string());
      have_set = true;
    } catch (const std::exception& error) {
      html += "<p class=\"missing\">" + html_escape(error.what()) + "</p>";
    }
  }
  if (have_set) {
    std::size_t wrong = 0;
    for (const auto& h : set.heatmaps) wrong += h.correct ? 0 : 1;
    html += fmt::format(
        "<p class=\"meta\" data-section=\"heatmaps-chosen\">Validation images classified with the best checkpoint "
        "(epoch {}): {} correct and {} wrong, found among the first {} of {} validation images (classes taken in "
        "turn). Colour: {}, averaged where tiles overlap.{}</p>",
        set.epoch, set.heatmaps.size() - wrong, wrong, set.scanned, set.validation_images,
        set.quantity == "attention" ? "each tile's attention weight" : "each tile's own probability of the predicted class",
        wrong == 0 ? " No misclassified image among those." : "");
    html += "<div class=\"heatmaps\">";
    for (const auto& h : set.heatmaps) {
      const fs::path png = dir / h.file;
      listed.push_back(png.filename().string());
      if (!fs::exists(png)) continue;
      html += heatmap_figure(
          png, h.correct ? "correct" : "wrong",
          fmt::format("<b class=\"{0}\">{0}</b>: true {1}, predicted {2} (p={3:.2f}) · {4} tiles<br>{5}",
                      h.correct ? "correct" : "wrong", html_escape(h.true_class), html_escape(h.predicted_class),
                      h.probability, h.tiles, html_escape(fs::path(h.image).filename().string())));
    }
    html += "</div>";
  }
  std::vector<fs::path> others;
  for (const auto& png : pngs)
    if (std::find(listed.begin(), listed.end(), png.filename().string()) == listed.end()) others.push_back(png);
  if (!others.empty()) {
    html += "<p class=\"meta\">Other heatmaps in <code>heatmaps/</code>:</p><div class=\"heatmaps\">";
    for (const auto& png : others) html += heatmap_figure(png, "other", html_escape(png.filename().string()));
    html += "</div>";
  }
  if (listed.empty() && others.empty())
    html += "<p class=\"missing\" data-section=\"heatmaps-missing\">No heatmaps in this run yet: the trainer draws "
            "them (correct and wrong validation images) with the best checkpoint each time the validation metric "
            "improves, so a run without a validation split has none. Others can be added with <code>bigtrain infer "
            "IMAGE... --checkpoint RUN_DIR/checkpoints/best.safetensors --heatmap RUN_DIR/heatmaps/x.png</code> and "
            "<code>bigtrain report RUN_DIR</code>; every PNG in <code>RUN_DIR/heatmaps/</code> is embedded.</p>";
  return html;
}

std::string metrics_table_html(const MetricsTable& table) {
  std::string html = "<table class=\"metrics\"><tr>";
  for (const auto& column : table.columns) html += "<th>" + html_escape(column) + "</th>";
  html += "</tr>";
  for (const auto& row : table.rows) {
    html += fmt::format("<tr class=\"{}\"><td>{}</td><td>{}</td>", html_escape(row.split), row.epoch, html_escape(row.split));
    for (std::size_t c = 2; c < row.values.size(); ++c)
      html += std::isnan(row.values[c]) ? std::string("<td></td>") : fmt::format("<td>{:.6g}</td>", row.values[c]);
    html += "</tr>";
  }
  return html + "</table>";
}

constexpr const char* kStyle = R"(
body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1240px}
h1{font-size:22px;margin:0 0 4px} h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ddd}
.charts{display:flex;flex-wrap:wrap;gap:12px} svg.chart{background:#fff;border:1px solid #e4e4e4}
svg text{font-size:11px;fill:#333} svg .title{font-size:13px;font-weight:600}
table{border-collapse:collapse;font-size:12px;margin:8px 0} td,th{border:1px solid #ccc;padding:3px 7px;text-align:right}
table.confusion td{min-width:48px;text-align:center;font-size:14px} caption{text-align:left;font-weight:600;padding:4px 0}
pre{background:#f6f6f6;padding:10px;font-size:12px;overflow:auto} .missing{color:#8a5a00;background:#fff6e0;padding:8px}
.heatmaps{display:flex;flex-wrap:wrap;gap:12px} .heatmaps img{max-width:380px;border:1px solid #ccc}
tr.best td,tr.best th{background:#e6f4e6;font-weight:600} tr.this td{font-weight:700;border-top:2px solid #333;border-bottom:2px solid #333}
figure{margin:0} figcaption{font-size:12px;max-width:380px} b.correct{color:#2ca02c} b.wrong{color:#d62728}
.meta{color:#666;font-size:12px}
)";

std::vector<std::vector<std::string>> parse_table_csv(const std::string& csv) {
  std::istringstream in(csv);
  std::vector<std::vector<std::string>> rows;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    std::vector<std::string> cells;
    std::size_t start = 0;
    for (std::size_t comma; (comma = line.find(',', start)) != std::string::npos; start = comma + 1)
      cells.push_back(line.substr(start, comma - start));
    cells.push_back(line.substr(start));
    rows.push_back(std::move(cells));
  }
  return rows;
}

// The run folder's own name: "out/tile64_overlap0/" -> "tile64_overlap0".
std::string last_component(const std::string& path) {
  fs::path p = fs::path(path).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

// The bar chart and table of a TablePage (rows[0] is the header), without the page around them.
std::string table_section(const TablePage& page, const std::vector<std::vector<std::string>>& rows) {
  const auto& header = rows[0];
  auto column_of = [&](const std::string& name) {
    const auto found = std::find(header.begin(), header.end(), name);
    return found == header.end() ? -1 : static_cast<int>(found - header.begin());
  };
  const int metric = column_of(page.metric_column), link = column_of(page.link_column), name = column_of("name");
  auto cell = [&](std::size_t r, int c) {
    return c >= 0 && static_cast<std::size_t>(c) < rows[r].size() ? rows[r][static_cast<std::size_t>(c)] : std::string();
  };
  std::string html;
  if (metric >= 0) {
    // Bars rather than lines: the runs are categories, not a sequence.
    constexpr double bar_h = 22, left = 160, width = 720;
    const double height = 40 + bar_h * static_cast<double>(rows.size() - 1);
    double largest = 0;
    for (std::size_t r = 1; r < rows.size(); ++r) largest = std::max(largest, std::atof(cell(r, metric).c_str()));
    if (!(largest > 0)) largest = 1;
    html += fmt::format("<svg class=\"chart\" data-chart=\"{}\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\">"
                        "<text class=\"title\" x=\"{}\" y=\"18\" text-anchor=\"middle\">{}</text>",
                        html_escape(page.metric_column), width, height, width / 2, html_escape(page.metric_column));
    for (std::size_t r = 1; r < rows.size(); ++r) {
      const double value = std::atof(cell(r, metric).c_str());
      const double y = 28 + bar_h * static_cast<double>(r - 1);
      const bool best = r - 1 == page.best_row, mine = page.this_row && r - 1 == *page.this_row;
      const std::string label = name >= 0 ? cell(r, name) : std::to_string(r);
      html += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\"{}>{}{}</text>"
                          "<rect class=\"bar{}\" x=\"{}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{}\" fill=\"{}\"/>"
                          "<text x=\"{:.1f}\" y=\"{:.1f}\">{:.4g}</text>",
                          left - 6, y + bar_h * 0.65, mine ? " font-weight=\"bold\"" : "", best ? "★ " : "",
                          html_escape(label), best ? " best" : "", left, y, (width - left - 60) * value / largest,
                          bar_h - 6, best ? kTestColour : kTrainColour, left + (width - left - 60) * value / largest + 4,
                          y + bar_h * 0.65, value);
    }
    html += "</svg>";
  }
  html += fmt::format("<table class=\"runs\" data-table=\"{}\"><tr><th></th>", html_escape(page.kind));
  for (const auto& text : header) html += "<th>" + html_escape(text) + "</th>";
  html += "</tr>";
  for (std::size_t r = 1; r < rows.size(); ++r) {
    const bool best = r - 1 == page.best_row, mine = page.this_row && r - 1 == *page.this_row;
    std::string classes = best ? "best" : "";
    if (mine) classes += classes.empty() ? "this" : " this";
    std::string mark = best ? "★ best" : "";
    if (mine) mark += mark.empty() ? "this run" : " · this run";
    html += fmt::format("<tr{}><td>{}</td>", classes.empty() ? "" : " class=\"" + classes + "\"", mark);
    for (std::size_t c = 0; c < rows[r].size(); ++c) {
      if (static_cast<int>(c) == link) {
        // Runs live in runs_dir when it is given, so the links survive the page being
        // rebuilt from another working directory.
        const fs::path run = page.runs_dir.empty() ? fs::path(rows[r][c]) : fs::path(page.runs_dir) / last_component(rows[r][c]);
        const fs::path target = run / "report.html";
        const std::string href = page.page_dir.empty() ? target.string()
                                                       : fs::relative(fs::absolute(target), fs::absolute(page.page_dir)).string();
        html += fmt::format("<td><a href=\"{}\">{}</a></td>", html_escape(href), html_escape(rows[r][c]));
      } else {
        html += "<td>" + html_escape(rows[r][c]) + "</td>";
      }
    }
    html += "</tr>";
  }
  return html + "</table>";
}

// A run of a sweep or comparison shows that table too, its own row marked: the
// trainer writes the page before the table exists, so the sweep rewrites its runs'
// pages once the table is complete (and `bigtrain report` finds it any time).
std::string run_tables_html(const fs::path& run_dir) {
  std::string html;
  const std::string me = last_component(run_dir.string());
  const fs::path parent = fs::absolute(run_dir).lexically_normal().parent_path();
  for (const std::string kind : {"sweep", "compare"}) {
    const fs::path csv = parent / (kind + ".csv");
    if (me.empty() || !fs::exists(csv)) continue;
    try {
      const auto rows = parse_table_csv(read_text(csv));
      if (rows.size() < 2) continue;
      const auto link = std::find(rows[0].begin(), rows[0].end(), "run_dir");
      if (link == rows[0].end()) continue;
      const auto column = static_cast<std::size_t>(link - rows[0].begin());
      std::optional<std::size_t> mine;
      for (std::size_t r = 1; r < rows.size(); ++r)
        if (column < rows[r].size() && last_component(rows[r][column]) == me) mine = r - 1;
      if (!mine) continue;
      TablePage page;
      page.kind = kind;
      page.this_row = mine;
      page.runs_dir = parent.string();
      page.page_dir = run_dir.string();
      html += fmt::format("<h2 id=\"{0}\">{0} table: this run among {1}</h2><p class=\"meta\">From <a href=\"../{0}.html\">"
                          "{0}.html</a> ({0}.csv next to this run's folder), best first by {2}; ★ marks the best, bold "
                          "this run.</p>",
                          kind, rows.size() - 1, kind == "sweep" ? "validation accuracy" : "accuracy");
      html += table_section(page, rows);
    } catch (const std::exception& error) {
      html += "<p class=\"missing\">" + html_escape(error.what()) + "</p>";
    }
  }
  return html;
}

}  // namespace

std::string html_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string base64_encode(std::string_view bytes) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const std::uint32_t v = static_cast<std::uint8_t>(bytes[i]) << 16 | static_cast<std::uint8_t>(bytes[i + 1]) << 8 |
                            static_cast<std::uint8_t>(bytes[i + 2]);
    for (int shift : {18, 12, 6, 0}) out += kAlphabet[(v >> shift) & 63];
  }
  if (i < bytes.size()) {
    std::uint32_t v = static_cast<std::uint8_t>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) v |= static_cast<std::uint8_t>(bytes[i + 1]) << 8;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::string svg_line_chart(const std::string& id, const std::string& title, const std::string& x_label,
                           const std::string& y_label, const std::vector<ChartSeries>& series) {
  constexpr double width = 400, height = 260, left = 62, right = 12, top = 28, bottom = 62;
  double x_min = std::numeric_limits<double>::infinity(), x_max = -x_min, y_min = x_min, y_max = -x_min;
  for (const auto& s : series)
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      x_min = std::min(x_min, x), x_max = std::max(x_max, x), y_min = std::min(y_min, y), y_max = std::max(y_max, y);
    }
  std::string svg = fmt::format(
      "<svg class=\"chart\" data-chart=\"{}\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
      "viewBox=\"0 0 {} {}\"><text class=\"title\" x=\"{}\" y=\"18\" text-anchor=\"middle\">{}</text>",
      html_escape(id), width, height, width, height, width / 2, html_escape(title));
  if (!std::isfinite(x_min)) return svg + fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">no data yet</text></svg>", width / 2, height / 2);
  // Epochs are integers: a single epoch still gets an axis one unit wide.
  if (x_max - x_min < 1) x_min -= 0.5, x_max += 0.5;
  if (y_max - y_min < 1e-12) {
    const double pad = std::max(std::abs(y_max) * 0.05, 1e-6);
    y_min -= pad, y_max += pad;
  }
  const double y_step = nice_step(y_max - y_min, 5);
  y_min = std::floor(y_min / y_step) * y_step;
  y_max = std::ceil(y_max / y_step) * y_step;
  const double x_step = std::max(1.0, nice_step(x_max - x_min, 8));
  const double plot_w = width - left - right, plot_h = height - top - bottom;
  auto sx = [&](double x) { return left + (x - x_min) / (x_max - x_min) * plot_w; };
  auto sy = [&](double y) { return top + (1 - (y - y_min) / (y_max - y_min)) * plot_h; };

  for (double y = y_min; y <= y_max + y_step * 1e-6; y += y_step)
    svg += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#eee\"/>"
                       "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>",
                       left, sy(y), width - right, sy(y), left - 5, sy(y) + 4, tick_label(y, y_step));
  for (double x = std::ceil(x_min / x_step) * x_step; x <= x_max + 1e-9; x += x_step)
    svg += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#999\"/>"
                       "<text x=\"{0:.1f}\" y=\"{3:.1f}\" text-anchor=\"middle\">{4}</text>",
                       sx(x), top + plot_h, top + plot_h + 4, top + plot_h + 16, tick_label(x, x_step));
  svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#999\"/>", left, top, plot_w, plot_h);
  svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>", left + plot_w / 2, top + plot_h + 32,
                     html_escape(x_label));
  svg += fmt::format("<text transform=\"translate(14,{}) rotate(-90)\" text-anchor=\"middle\">{}</text>", top + plot_h / 2,
                     html_escape(y_label));
  double legend_x = left;
  for (const auto& s : series) {
    std::string points;
    std::string dots;
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      points += fmt::format("{:.1f},{:.1f} ", sx(x), sy(y));
      dots += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"2.5\" fill=\"{}\"><title>{} epoch {}: {:.6g}</title></circle>",
                          sx(x), sy(y), s.colour, html_escape(s.name), x, y);
    }
    svg += fmt::format("<polyline class=\"series\" data-series=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\" "
                       "points=\"{}\"/>{}",
                       html_escape(s.name), s.colour, points, dots);
    svg += fmt::format("<rect x=\"{:.1f}\" y=\"{}\" width=\"12\" height=\"3\" fill=\"{}\"/><text x=\"{:.1f}\" y=\"{}\">{}</text>",
                       legend_x, height - 14, s.colour, legend_x + 16, height - 10, html_escape(s.name));
    legend_x += 24 + 7.0 * static_cast<double>(s.name.size());
  }
  return svg + "</svg>";
}

std::string render_run_report(const std::string& run_dir_text) {
  const fs::path run_dir(run_dir_text);
  const fs::path metrics_path = run_dir / "metrics.csv";
  if (!fs::exists(metrics_path))
    throw Error(fmt::format("{}: no metrics.csv; is this a bigtrain run directory?", run_dir.string()));
  const MetricsTable metrics = parse_metrics_csv(read_text(metrics_path), metrics_path.string());

  std::int64_t epochs = 0;
  for (const auto& row : metrics.rows) epochs = std::max(epochs, row.epoch);
  std::string html = "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">";
  html += "<title>bigtrain report: " + html_escape(run_dir.filename().string()) + "</title><style>" + kStyle +
          "</style></head><body>";
  const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::array<char, 32> stamp{};
  std::strftime(stamp.data(), stamp.size(), "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&now));
  html += fmt::format("<h1>bigtrain run {}</h1><p class=\"meta\">{} epoch(s) in metrics.csv · page written {} · "
                      "TensorBoard: <code>tensorboard --logdir {}</code></p>",
                      html_escape(run_dir.string()), epochs, stamp.data(), html_escape(run_dir.string()));

  const std::vector<std::string> train_val = {"train", "val"};
  html += "<h2 id=\"curves\">Training curves</h2><div class=\"charts\">";
  html += svg_line_chart("loss", "Loss", "epoch", "cross-entropy", split_series(metrics, "loss", train_val));
  auto accuracy = split_series(metrics, "accuracy", train_val, " accuracy");
  for (auto& s : split_series(metrics, "balanced_accuracy", {"val"}, " balanced")) {
    s.colour = kExtraColour;
    accuracy.push_back(std::move(s));
  }
  html += svg_line_chart("accuracy", "Accuracy", "epoch", "fraction correct", accuracy);
  html += svg_line_chart("lr", "Learning rate (end of epoch)", "epoch", "learning rate",
                         split_series(metrics, "lr", {"train"}));
  html += svg_line_chart("images_per_s", "Throughput: images/s", "epoch", "images/s",
                         split_series(metrics, "images_per_s", train_val));
  html += svg_line_chart("tiles_per_s", "Throughput: tiles/s", "epoch", "tiles/s",
                         split_series(metrics, "tiles_per_s", train_val));
  constexpr double mib = 1.0 / (1024.0 * 1024.0);
  auto memory = split_series(metrics, "peak_rss_bytes", {"train"}, " peak RSS", mib);
  for (auto& s : split_series(metrics, "peak_allocated_bytes", {"train"}, " peak allocator", mib)) {
    s.colour = kExtraColour;
    memory.push_back(std::move(s));
  }
  // CUDA runs: the device allocator's peaks (empty cells, so no series, on the CPU).
  for (auto& s : split_series(metrics, "device_peak_bytes", {"train"}, " peak device", mib)) {
    s.colour = kTestColour;
    memory.push_back(std::move(s));
  }
  for (auto& s : split_series(metrics, "device_peak_reserved_bytes", {"train"}, " device reserved", mib)) {
    s.colour = kValColour;
    memory.push_back(std::move(s));
  }
  html += svg_line_chart("memory", "Peak memory", "epoch", "MiB", memory);
  html += "</div>";

  html += "<h2 id=\"confusion\">Confusion matrices</h2>";
  bool any_confusion = false;
  for (const std::string split : {"test", "val"}) {
    const fs::path path = run_dir / fmt::format("confusion_{}.csv", split);
    if (!fs::exists(path)) continue;
    html += confusion_table(parse_confusion_csv(read_text(path), path.string()), split);
    any_confusion = true;
  }
  if (!any_confusion) html += "<p class=\"missing\">No confusion_val.csv or confusion_test.csv yet.</p>";

  html += heatmaps_html(run_dir);
  html += run_tables_html(run_dir);
  html += data_summary_html(run_dir, metrics);
  html += "<h2 id=\"metrics\">metrics.csv</h2>" + metrics_table_html(metrics);
  const fs::path config = run_dir / "config.yaml";
  html += "<h2 id=\"config\">Resolved config</h2>";
  html += fs::exists(config) ? "<pre class=\"config\">" + html_escape(read_text(config)) + "</pre>"
                             : std::string("<p class=\"missing\">No config.yaml in this run directory.</p>");
  return html + "</body></html>\n";
}

std::string render_table_report(const TablePage& page) {
  const auto rows = parse_table_csv(page.csv);
  if (rows.empty()) throw Error(fmt::format("{}: no table to show", page.title));
  std::string html = "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>" + html_escape(page.title) +
                     "</title><style>" + kStyle + "</style></head><body><h1>" + html_escape(page.title) + "</h1>";
  if (!page.subtitle.empty()) html += "<p class=\"meta\">" + html_escape(page.subtitle) + "</p>";
  html += fmt::format("<p class=\"meta\">{} runs, best first; the best is marked ★ and highlighted. Each run's name "
                      "links to its own report.</p>",
                      rows.size() - 1);
  return html + table_section(page, rows) + "</body></html>\n";
}

std::string write_table_report(const std::string& dir, const std::string& kind, const std::string& subtitle) {
  const fs::path csv = fs::path(dir) / (kind + ".csv");
  if (!fs::exists(csv)) throw Error(fmt::format("{}: no {}.csv in this folder", dir, kind));
  TablePage page;
  page.title = "bigtrain " + kind + ": " + fs::absolute(dir).lexically_normal().filename().string();
  page.csv = read_text(csv);
  page.kind = kind;
  page.subtitle = subtitle;
  page.runs_dir = dir;
  page.page_dir = dir;
  const std::string path = (fs::path(dir) / (kind + ".html")).string();
  write_file_atomically(path, render_table_report(page));
  const auto rows = parse_table_csv(page.csv);
  const auto link = std::find(rows[0].begin(), rows[0].end(), page.link_column);
  for (std::size_t r = 1; link != rows[0].end() && r < rows.size(); ++r) {
    const auto column = static_cast<std::size_t>(link - rows[0].begin());
    if (column >= rows[r].size()) continue;
    const fs::path run = fs::path(dir) / last_component(rows[r][column]);
    if (fs::exists(run / "metrics.csv")) write_run_report(run.string());
  }
  return path;
}

std::string write_run_report(const std::string& run_dir, const Dataset* dataset) {
  if (dataset)
    write_file_atomically((fs::path(run_dir) / "data_summary.json").string(), data_summary_json(summarize_dataset(*dataset)));
  const std::string path = (fs::path(run_dir) / "report.html").string();
  write_file_atomically(path, render_run_report(run_dir));
  return path;
}

void update_run_outputs(const std::string& run_dir, const Dataset& dataset) {
  try {
    write_run_report(run_dir, &dataset);
    write_tensorboard_events(run_dir);
  } catch (const std::exception& error) {
    spdlog::warn("{}: could not update report.html / TensorBoard events: {}", run_dir, error.what());
  }
}

}  // namespace bigtrain
