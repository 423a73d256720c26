#include "sim/suite.hpp"

#include <stdexcept>

namespace dls::sim {

std::vector<sim_request> suite_requests(const sim_cluster& c, const std::vector<trace_row>& rows,
                                        double load, bool reject) {
  if (!(load > 0)) throw std::invalid_argument("suite: load must be > 0");
  std::vector<canvas_shape> shapes;
  shapes.reserve(rows.size());
  for (const auto& r : rows) shapes.push_back(to_canvas(r, c.block_len, c.max_canvas));
  const double capacity = cluster_capacity_rps(c, length_mix(shapes, 16, c.block_len));
  // Arrival times scaled so the mean rate is load x capacity; the arrival pattern is kept.
  const double factor = trace_rate(rows) / (load * capacity);
  std::vector<sim_request> out;
  out.reserve(rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    sim_request q{rows[i].t * factor, shapes[i].prompt_len, shapes[i].gen_len, shapes[i].answer_blocks};
    q.reject_on_miss = reject;
    out.push_back(q);
  }
  return out;
}

std::vector<result_row> run_suite(const sim_cluster& c, const std::vector<workload_spec>& suite,
                                  const suite_config& cfg) {
  for (const auto& p : cfg.policies) (void)policy::make_policy_set(p);  // fail before any run
  for (const auto& m : cfg.on_miss)
    if (m != "workload" && m != "serve" && m != "reject")
      throw std::invalid_argument("suite: on_miss must be workload, serve or reject, not '" + m + "'");
  std::size_t variants = 0;
  for (const auto& w : suite) variants += w.arrivals.size();
  const std::size_t total =
      variants * cfg.loads.size() * cfg.slo_scales.size() * cfg.on_miss.size() * cfg.policies.size();
  std::size_t done = 0;
  std::vector<result_row> out;
  for (const auto& w0 : suite) {
    workload_spec w = w0;
    if (cfg.requests) w.requests = cfg.requests;
    for (const auto& a : w.arrivals) {
      const auto rows = workload_rows(w, a, cfg.seed);
      const std::string label = w.name + "/" + a.label();
      for (const auto& miss : cfg.on_miss) {
        const bool reject = miss == "reject" || (miss == "workload" && w.reject_on_miss);
        for (double load : cfg.loads) {
          const auto reqs = suite_requests(c, rows, load, reject);
          for (double slo : cfg.slo_scales)
            for (const auto& pname : cfg.policies) {
              run_config rc;
              rc.policy = policy::make_policy_set(pname);
              rc.slo_scale = slo;
              rc.seed = cfg.seed;
              const std::string what = label + " " + pname + " load " + std::to_string(load).substr(0, 4);
              if (cfg.progress) rc.progress = [&](double f) { cfg.progress(done, total, f, what); };
              const auto res = simulate(c, reqs, rc);
              auto row = summarize(res, pname, load, slo);
              row.workload = label;
              row.on_miss = reject ? "reject" : "serve";
              if (cfg.each_run) cfg.each_run(row, reqs, res);
              out.push_back(std::move(row));
              ++done;
              if (cfg.progress) cfg.progress(done, total, 0.0, what);
            }
        }
      }
    }
  }
  return out;
}

}  // namespace dls::sim
