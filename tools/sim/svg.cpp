// A dependency-free SVG line chart of SLO attainment against load, one line per policy.
#include "sim/report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

namespace dls::sim {

std::string attainment_svg(const std::vector<result_row>& rows, double slo_scale) {
  std::map<std::string, std::vector<std::pair<double, double>>> lines;
  std::vector<std::string> order;
  double xmin = 1e300, xmax = -1e300;
  for (const auto& r : rows) {
    if (std::fabs(r.slo_scale - slo_scale) > 1e-9) continue;
    if (!lines.count(r.policy)) order.push_back(r.policy);
    lines[r.policy].push_back({r.load, 100.0 * r.slo_attainment});
    xmin = std::min(xmin, r.load);
    xmax = std::max(xmax, r.load);
  }
  if (order.empty()) return {};
  if (xmax <= xmin) xmax = xmin + 1.0;
  const double w = 720, h = 440, left = 60, right = 170, top = 40, bottom = 50;
  const double pw = w - left - right, ph = h - top - bottom;
  auto px = [&](double x) { return left + (x - xmin) / (xmax - xmin) * pw; };
  auto py = [&](double y) { return top + (1.0 - y / 100.0) * ph; };
  static const char* colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
                                 "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#000000"};
  std::ostringstream os;
  char buf[256];
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w << "\" height=\"" << h
     << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  os << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  std::snprintf(buf, sizeof buf, "SLO attainment vs load (SLO scale %.2g)", slo_scale);
  os << "<text x=\"" << left << "\" y=\"24\" font-size=\"15\">" << buf << "</text>\n";
  for (int i = 0; i <= 5; ++i) {  // y grid every 20 %
    const double y = py(i * 20.0);
    os << "<line x1=\"" << left << "\" y1=\"" << y << "\" x2=\"" << left + pw << "\" y2=\"" << y
       << "\" stroke=\"#ddd\"/>\n<text x=\"" << left - 8 << "\" y=\"" << y + 4
       << "\" text-anchor=\"end\">" << i * 20 << "</text>\n";
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
     << "\" text-anchor=\"middle\">load (fraction of cluster capacity at tau = 0.9)</text>\n";
  os << "<text transform=\"translate(16," << top + ph / 2
     << ") rotate(-90)\" text-anchor=\"middle\">SLO attainment (%)</text>\n";
  for (std::size_t k = 0; k < order.size(); ++k) {
    auto pts = lines[order[k]];
    std::sort(pts.begin(), pts.end());
    const char* c = colors[k % (sizeof colors / sizeof *colors)];
    os << "<polyline fill=\"none\" stroke=\"" << c << "\" stroke-width=\"2\" points=\"";
    for (const auto& [x, y] : pts) os << px(x) << ',' << py(y) << ' ';
    os << "\"/>\n";
    for (const auto& [x, y] : pts)
      os << "<circle cx=\"" << px(x) << "\" cy=\"" << py(y) << "\" r=\"3\" fill=\"" << c << "\"/>\n";
    const double ly = top + 14 + 18.0 * static_cast<double>(k);
    os << "<line x1=\"" << left + pw + 12 << "\" y1=\"" << ly - 4 << "\" x2=\"" << left + pw + 32
       << "\" y2=\"" << ly - 4 << "\" stroke=\"" << c << "\" stroke-width=\"2\"/>\n<text x=\""
       << left + pw + 38 << "\" y=\"" << ly << "\">" << order[k] << "</text>\n";
  }
  os << "</svg>\n";
  return os.str();
}

}  // namespace dls::sim
