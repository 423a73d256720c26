// Dependency-free SVG line charts against load, one colour per policy: SLO attainment, and
// latency (mean and p99).
#include "sim/report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <sstream>

namespace dls::sim {

namespace {

struct series {
  const char* name;                                  // legend suffix; empty for a single series
  std::function<double(const result_row&)> value;    // y of one row
  const char* dash;                                  // stroke-dasharray, "" for solid
};

std::string line_chart(const std::vector<result_row>& rows, double slo_scale, const std::string& title,
                       const char* y_label, const std::vector<series>& kinds, double y_max_fixed) {
  std::map<std::string, std::vector<const result_row*>> by_policy;
  std::vector<std::string> order;
  double xmin = 1e300, xmax = -1e300, ymax = 0;
  for (const auto& r : rows) {
    if (std::fabs(r.slo_scale - slo_scale) > 1e-9) continue;
    if (!by_policy.count(r.policy)) order.push_back(r.policy);
    by_policy[r.policy].push_back(&r);
    xmin = std::min(xmin, r.load);
    xmax = std::max(xmax, r.load);
    for (const auto& k : kinds) ymax = std::max(ymax, k.value(r));
  }
  if (order.empty()) return {};
  if (xmax <= xmin) xmax = xmin + 1.0;
  // Fixed axes (attainment in %) or the data's maximum rounded up to 1, 2 or 5 x 10^k.
  if (y_max_fixed > 0) {
    ymax = y_max_fixed;
  } else {
    const double mag = std::pow(10.0, std::floor(std::log10(ymax > 0 ? ymax : 1.0)));
    for (double m : {1.0, 2.0, 5.0, 10.0})
      if (ymax <= m * mag) {
        ymax = m * mag;
        break;
      }
  }
  const double w = 720, h = 440, left = 60, right = 190, top = 40, bottom = 50;
  const double pw = w - left - right, ph = h - top - bottom;
  auto px = [&](double x) { return left + (x - xmin) / (xmax - xmin) * pw; };
  auto py = [&](double y) { return top + (1.0 - y / ymax) * ph; };
  static const char* colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
                                 "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#000000"};
  std::ostringstream os;
  char buf[256];
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w << "\" height=\"" << h
     << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  os << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  std::snprintf(buf, sizeof buf, "%s (SLO scale %.2g)", title.c_str(), slo_scale);
  os << "<text x=\"" << left << "\" y=\"24\" font-size=\"15\">" << buf << "</text>\n";
  for (int i = 0; i <= 5; ++i) {  // y grid in fifths
    const double yv = ymax * i / 5.0;
    const double y = py(yv);
    std::snprintf(buf, sizeof buf, "%g", yv);
    os << "<line x1=\"" << left << "\" y1=\"" << y << "\" x2=\"" << left + pw << "\" y2=\"" << y
       << "\" stroke=\"#ddd\"/>\n<text x=\"" << left - 8 << "\" y=\"" << y + 4
       << "\" text-anchor=\"end\">" << buf << "</text>\n";
  }
  for (int i = 0; i <= 5; ++i) {
    const double xv = xmin + (xmax - xmin) * i / 5.0;
    std::snprintf(buf, sizeof buf, "%.2f", xv);
    os << "<text x=\"" << px(xv) << "\" y=\"" << top + ph + 18 << "\" text-anchor=\"middle\">"
       << buf << "</text>\n";
  }
  os << "<rect x=\"" << left << "\" y=\"" << top << "\" width=\"" << pw << "\" height=\"" << ph
     << "\" fill=\"none\" stroke=\"#333\"/>\n";
  os << "<text x=\"" << left + pw / 2 << "\" y=\"" << h - 10
     << "\" text-anchor=\"middle\">load (fraction of cluster capacity)</text>\n";
  os << "<text transform=\"translate(16," << top + ph / 2 << ") rotate(-90)\" text-anchor=\"middle\">" << y_label
     << "</text>\n";
  std::size_t legend = 0;
  for (std::size_t k = 0; k < order.size(); ++k) {
    auto pts = by_policy[order[k]];
    std::sort(pts.begin(), pts.end(), [](const result_row* a, const result_row* b) { return a->load < b->load; });
    const char* c = colors[k % (sizeof colors / sizeof *colors)];
    for (const auto& kind : kinds) {
      os << "<polyline fill=\"none\" stroke=\"" << c << "\" stroke-width=\"2\"";
      if (*kind.dash) os << " stroke-dasharray=\"" << kind.dash << "\"";
      os << " points=\"";
      for (const auto* r : pts) os << px(r->load) << ',' << py(kind.value(*r)) << ' ';
      os << "\"/>\n";
      for (const auto* r : pts)
        os << "<circle cx=\"" << px(r->load) << "\" cy=\"" << py(kind.value(*r)) << "\" r=\"3\" fill=\"" << c
           << "\"/>\n";
      const double ly = top + 14 + 18.0 * static_cast<double>(legend++);
      os << "<line x1=\"" << left + pw + 12 << "\" y1=\"" << ly - 4 << "\" x2=\"" << left + pw + 32 << "\" y2=\""
         << ly - 4 << "\" stroke=\"" << c << "\" stroke-width=\"2\"";
      if (*kind.dash) os << " stroke-dasharray=\"" << kind.dash << "\"";
      os << "/>\n<text x=\"" << left + pw + 38 << "\" y=\"" << ly << "\">" << order[k]
         << (*kind.name ? std::string(" ") + kind.name : std::string()) << "</text>\n";
    }
  }
  os << "</svg>\n";
  return os.str();
}

}  // namespace

std::string attainment_svg(const std::vector<result_row>& rows, double slo_scale) {
  return line_chart(rows, slo_scale, "SLO attainment vs load", "SLO attainment (%)",
                    {{"", [](const result_row& r) { return 100.0 * r.slo_attainment; }, ""}}, 100.0);
}

std::string latency_svg(const std::vector<result_row>& rows, double slo_scale) {
  return line_chart(rows, slo_scale, "Latency vs load", "latency (ms)",
                    {{"mean", [](const result_row& r) { return 1e3 * r.mean_latency_s; }, ""},
                     {"p99", [](const result_row& r) { return 1e3 * r.p99_latency_s; }, "6,4"}},
                    0.0);
}

}  // namespace dls::sim
