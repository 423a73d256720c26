// `dilaserve bench-soak`: the overload soak. Starts its own cluster with load shedding on,
// measures its capacity, offers a multiple of it open loop (Poisson arrivals whose times do not
// depend on completions) for --duration, and samples the head's and every node's RSS, the
// groups' tau and refusals every --sample-s. At the end: offered, answered, refused (with the
// client's refusal latency), other errors and lost requests (never answered), the RSS at the
// reference time against its range afterwards, and when tau was first lowered against when the
// first request was refused. Samples go to OUT/samples.csv, the figures to OUT/summary.json.
// Ctrl-C ends the load early: the figures so far are written, marked interrupted, and the
// cluster is stopped.
#include "dilaserve/bench_cluster.hpp"
#include "dilaserve/cluster_file_copy.hpp"
#include "dilaserve/command_registry.hpp"
#include "dilaserve/median.hpp"
#include "runtime/client.hpp"
#include "runtime/messages.hpp"
#include "runtime/state_dir.hpp"

#include <caf/all.hpp>
#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <random>
#include <thread>

namespace fs = std::filesystem;
namespace rt = dls::runtime;
using json = nlohmann::json;
using clock_type = std::chrono::steady_clock;

namespace {

struct soak_options {
  std::string config = "configs/local.yaml";
  std::string policy = "dilaserve";
  double duration_s = 1800;
  double load = 2.0;
  double sample_s = 5;
  double rss_ref_s = 300;
  int capacity_requests = 400;
  // The soak's requests ask for an answer within a second: an interactive SLO, a workload choice
  // (0: the cluster's own deadline, slo_scale x solo latency).
  int slo_ms = 1000;
  double drain_s = 120;
  unsigned seed = 1;
  std::string out = "soak-out";
};

// The capacity rounds give every request an hour of SLO: nothing can be refused or hurried,
// so the figure is the saturated throughput at the reference tau.
constexpr int capacity_slo_ms = 3600 * 1000;
// A capacity round of a few hundred tiny-model requests takes about a second; five minutes
// means the cluster is not serving at all.
constexpr auto capacity_round_limit = std::chrono::seconds(300);
// How often a wait for answers looks at the interrupt flag: short against a person's patience,
// long against an answer's arrival.
constexpr auto interrupt_poll = std::chrono::milliseconds(200);

double secs(clock_type::duration d) { return std::chrono::duration<double>(d).count(); }

// The cluster file with its relative paths made absolute (the copy lives in OUT), free ports,
// and the policy and shedding under test.
std::string write_cluster_file(const soak_options& o, const fs::path& out) {
  auto root = dls::cli::cluster_file_with_absolute_paths(o.config);
  root["head"]["port"] = 0;
  if (root["http"]) root["http"]["port"] = 0;
  if (root["scheduler"] && root["scheduler"].IsScalar()) {
    YAML::Node m;
    m["policy"] = root["scheduler"].as<std::string>();
    root["scheduler"] = m;
  }
  root["scheduler"]["policy"] = o.policy;
  root["scheduler"]["on_overload"] = "refuse";
  const auto path = (out / "cluster.yaml").string();
  std::ofstream(path) << root << "\n";
  return path;
}

std::vector<std::string> eval_prompts(const std::string& cluster_file) {
  auto root = YAML::LoadFile(cluster_file);
  const auto path = fs::path(root["model"]["path"].as<std::string>()) / "eval.jsonl";
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path.string() + " (the soak's prompts)");
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(json::parse(line).at("prompt").get<std::string>());
  if (out.empty()) throw std::runtime_error(path.string() + " holds no prompts");
  return out;
}

long rss_kb(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

json status_of(rt::cluster_session& s, caf::scoped_actor& self) {
  json out;
  self->request(s.head(), std::chrono::seconds(30), rt::status_atom::value)
      .receive([&](std::string& text) { out = json::parse(text, nullptr, false); },
               [&](caf::error&) {});
  return out.is_object() ? out : json();
}

// Saturated throughput: n requests at once, answers per second; the median of three rounds.
double measure_capacity(rt::cluster_session& s, const std::vector<std::string>& prompts, int n) {
  std::vector<double> rps;
  for (int round = 0; round < 3; ++round) {
    caf::scoped_actor self{s.system()};
    const auto t0 = clock_type::now();
    for (int i = 0; i < n; ++i) {
      rt::submit_spec spec;
      spec.prompt = prompts[static_cast<std::size_t>(i) % prompts.size()];
      spec.slo_ms = capacity_slo_ms;
      spec.tag = static_cast<uint64_t>(i);
      spec.client = caf::actor_cast<caf::actor>(self);
      self->send(s.head(), rt::submit_atom::value, std::move(spec));
    }
    const auto give_up = t0 + capacity_round_limit;
    for (int got = 0; got < n;) {
      dls::cli::throw_if_interrupted();
      if (clock_type::now() > give_up) throw std::runtime_error("capacity round timed out");
      self->receive(
          [&](rt::answer& a) {
            if (!a.ok) throw std::runtime_error("capacity round: request failed: " + a.error);
            ++got;
          },
          [&](rt::block_chunk&) {}, caf::after(interrupt_poll) >> [] {});
    }
    rps.push_back(n / secs(clock_type::now() - t0));
    std::printf("capacity round %d: %d requests in %.2f s = %.1f req/s\n", round + 1, n, n / rps.back(), rps.back());
  }
  return dls::cli::median(rps);
}

struct counters {
  std::atomic<uint64_t> sent{0}, answered{0}, refused{0}, failed{0};
};

struct sample {
  double t_s = 0;
  std::vector<long> rss_kb;  // per process, in the state file's order
  uint64_t sent = 0, answered = 0, refused = 0, failed = 0;
  double tau_cap = -1, lowest_tau = -1;  // min over the live groups; -1: not known
  long group_refused = 0, queued = 0;
  bool status_ok = false;
};

struct soak_result {
  std::vector<sample> samples;
  std::vector<double> refusal_ms, answer_ms;
  uint64_t sent = 0, failed = 0;
  std::string first_failure;
};

// The open loop: arrivals at `rate` until `duration`, answers counted as they come; then up to
// drain_s for the answers still owed. A sampler thread records RSS and the groups' state.
soak_result run_soak(rt::cluster_session& s, const rt::cluster_state& st, const std::vector<std::string>& prompts,
                     double rate, const soak_options& o, const fs::path& out) {
  soak_result res;
  counters c;
  std::mutex mu;
  std::condition_variable stop_cv;
  bool stop = false;
  const auto t0 = clock_type::now();
  std::ofstream csv(out / "samples.csv");
  csv << "t_s";
  for (const auto& p : st.processes) csv << ",rss_kb_" << p.role << "_" << p.name;
  csv << ",sent,answered,refused,failed,in_flight,tau_cap,lowest_tau,group_refused,queued\n";
  std::thread sampler([&] {
    caf::scoped_actor self{s.system()};
    // The row after the stop is the last one, so its counters are the final ones.
    for (bool last = false;;) {
      sample x;
      x.t_s = secs(clock_type::now() - t0);
      for (const auto& p : st.processes) x.rss_kb.push_back(rss_kb(p.pid));
      auto status = status_of(s, self);
      x.status_ok = status.is_object();
      if (x.status_ok) {
        for (auto& g : status["groups"]) {
          const double cap = g.value("tau_cap", -1.0), low = g.value("lowest_tau", -1.0);
          if (cap >= 0) x.tau_cap = x.tau_cap < 0 ? cap : std::min(x.tau_cap, cap);
          if (low >= 0) x.lowest_tau = x.lowest_tau < 0 ? low : std::min(x.lowest_tau, low);
          x.group_refused += g.value("refused", 0L) + g.value("refused_at_placement", 0L);
          x.queued += g.value("queue", 0L);
        }
      }
      x.sent = c.sent;
      x.answered = c.answered;
      x.refused = c.refused;
      x.failed = c.failed;
      const auto in_flight = static_cast<long>(x.sent - x.answered - x.refused - x.failed);
      csv << x.t_s;
      for (auto r : x.rss_kb) csv << "," << r;
      csv << "," << x.sent << "," << x.answered << "," << x.refused << "," << x.failed << "," << in_flight << ","
          << x.tau_cap << "," << x.lowest_tau << "," << x.group_refused << "," << x.queued << "\n";
      csv.flush();
      std::printf("[%6.0f s] rss", x.t_s);
      for (std::size_t i = 0; i < x.rss_kb.size(); ++i)
        std::printf("%s %s %ld KB", i ? "," : "", st.processes[i].name.c_str(), x.rss_kb[i]);
      std::printf(" | sent %lu answered %lu refused %lu failed %lu in flight %ld | tau cap %.2f lowest %.2f\n",
                  static_cast<unsigned long>(x.sent), static_cast<unsigned long>(x.answered),
                  static_cast<unsigned long>(x.refused), static_cast<unsigned long>(x.failed), in_flight, x.tau_cap,
                  x.lowest_tau);
      std::fflush(stdout);
      {
        std::lock_guard<std::mutex> lk(mu);
        res.samples.push_back(std::move(x));
      }
      if (last) return;
      std::unique_lock<std::mutex> lk(mu);
      last = stop_cv.wait_for(lk, std::chrono::duration<double>(o.sample_s), [&] { return stop; });
    }
  });

  caf::scoped_actor self{s.system()};
  self->monitor(s.head());
  std::mt19937_64 rng(o.seed);
  std::exponential_distribution<double> gap(rate);
  std::vector<double> sent_at;  // by tag: seconds after t0
  sent_at.reserve(static_cast<std::size_t>(rate * o.duration_s * 1.1) + 16);
  double next_s = gap(rng);
  std::string lost_head;
  auto on_answer = [&](rt::answer& a) {
    if (a.tag >= sent_at.size()) return;
    const double ms = 1e3 * (secs(clock_type::now() - t0) - sent_at[a.tag]);
    if (a.ok) {
      ++c.answered;
      res.answer_ms.push_back(ms);
    } else if (a.error.rfind(rt::overloaded_error, 0) == 0) {
      ++c.refused;
      res.refusal_ms.push_back(ms);
    } else {
      ++c.failed;
      if (res.first_failure.empty()) res.first_failure = a.error;
    }
  };
  auto owed = [&] { return c.sent - c.answered - c.refused - c.failed; };
  auto receive_until = [&](clock_type::time_point until) {
    const auto wait = std::max<clock_type::duration>(until - clock_type::now(), clock_type::duration::zero());
    self->receive(on_answer, [&](rt::block_chunk&) {},
                  [&](caf::down_msg& dm) { lost_head = s.system().render(dm.reason); },
                  caf::after(std::chrono::duration_cast<std::chrono::microseconds>(wait)) >> [] {});
  };
  const auto end = t0 + std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(o.duration_s));
  while (lost_head.empty() && !dls::cli::interrupted() && clock_type::now() < end) {
    const double now = secs(clock_type::now() - t0);
    while (next_s <= now && next_s < o.duration_s) {
      rt::submit_spec spec;
      spec.prompt = prompts[sent_at.size() % prompts.size()];
      if (o.slo_ms > 0) spec.slo_ms = o.slo_ms;
      spec.tag = sent_at.size();
      spec.client = caf::actor_cast<caf::actor>(self);
      sent_at.push_back(now);
      self->send(s.head(), rt::submit_atom::value, std::move(spec));
      ++c.sent;
      next_s += gap(rng);
    }
    receive_until(std::min({end, t0 + std::chrono::duration_cast<clock_type::duration>(
                                          std::chrono::duration<double>(next_s)),
                            clock_type::now() + interrupt_poll}));
  }
  const auto drain_end =
      clock_type::now() + std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(o.drain_s));
  while (lost_head.empty() && !dls::cli::interrupted() && owed() > 0 && clock_type::now() < drain_end)
    receive_until(std::min(drain_end, clock_type::now() + interrupt_poll));
  if (!lost_head.empty()) res.first_failure = "lost the head (" + lost_head + ")";
  {
    std::lock_guard<std::mutex> lk(mu);
    stop = true;
  }
  stop_cv.notify_all();
  sampler.join();
  res.sent = c.sent;
  res.failed = c.failed;
  return res;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size() - 1) + 0.5))];
}

json summarize(const soak_options& o, const rt::cluster_state& st, const soak_result& r, double capacity, double rate,
               double tau_max) {
  json j;
  const uint64_t answered = r.answer_ms.size(), refused = r.refusal_ms.size(), failed = r.failed, sent = r.sent;
  const uint64_t lost = sent - answered - refused - failed;
  j["command"] = "dilaserve bench-soak --config " + o.config + " --duration " + std::to_string(o.duration_s);
  j["interrupted"] = dls::cli::interrupted();
  j["policy"] = o.policy;
  j["capacity_rps"] = capacity;
  j["offered_rps"] = rate;
  j["duration_s"] = o.duration_s;
  j["offered"] = sent;
  j["accepted"] = sent - refused;
  j["answered"] = answered;
  j["refused"] = refused;
  j["other_errors"] = failed;
  if (!r.first_failure.empty()) j["first_error"] = r.first_failure;
  // Cut short, the answers still owed are not known to be lost: they are counted apart.
  if (dls::cli::interrupted())
    j["unanswered_when_interrupted"] = lost;
  else
    j["lost"] = lost;
  j["answer_latency_ms"] = {{"p50", percentile(r.answer_ms, 0.5)}, {"p99", percentile(r.answer_ms, 0.99)}};
  j["refusal_latency_ms"] = {{"p50", percentile(r.refusal_ms, 0.5)}, {"p99", percentile(r.refusal_ms, 0.99)}};
  // RSS: the sample nearest the reference time against every later sample taken while the load ran.
  j["rss"] = json::array();
  bool within = true;
  for (std::size_t p = 0; p < st.processes.size(); ++p) {
    const sample* ref = nullptr;
    for (const auto& x : r.samples)
      if (x.t_s >= o.rss_ref_s) {
        ref = &x;
        break;
      }
    if (!ref) continue;
    long lo = ref->rss_kb[p], hi = ref->rss_kb[p];
    for (const auto& x : r.samples)
      if (x.t_s >= ref->t_s && x.t_s <= o.duration_s && x.rss_kb[p] > 0) {
        lo = std::min(lo, x.rss_kb[p]);
        hi = std::max(hi, x.rss_kb[p]);
      }
    const double up = 100.0 * (static_cast<double>(hi) / ref->rss_kb[p] - 1),
                 down = 100.0 * (1 - static_cast<double>(lo) / ref->rss_kb[p]);
    const bool ok = up <= 10 && down <= 10;
    within = within && ok;
    j["rss"].push_back({{"process", st.processes[p].role + " " + st.processes[p].name},
                        {"ref_t_s", ref->t_s},
                        {"ref_kb", ref->rss_kb[p]},
                        {"min_kb", lo},
                        {"max_kb", hi},
                        {"above_ref_pct", up},
                        {"below_ref_pct", down},
                        {"within_10pct", ok}});
  }
  j["rss_within_10pct"] = within;
  double lowered = -1, first_refused = -1;
  for (const auto& x : r.samples) {
    if (lowered < 0 && x.lowest_tau >= 0 && x.lowest_tau < tau_max) lowered = x.t_s;
    if (first_refused < 0 && x.refused > 0) first_refused = x.t_s;
  }
  j["first_sample_tau_lowered_s"] = lowered;
  j["first_sample_with_refusals_s"] = first_refused;
  return j;
}

int run_bench_soak(const soak_options& o) {
  const fs::path out = fs::absolute(o.out);
  fs::create_directories(out);
  const auto cluster_file = write_cluster_file(o, out);
  const auto state_dir = (out / "state").string();
  const auto prompts = eval_prompts(cluster_file);
  std::printf("bench-soak: %s with policy %s and on_overload: refuse; state and logs in %s\n", o.config.c_str(),
              o.policy.c_str(), state_dir.c_str());
  dls::cli::catch_interrupts();
  // Stopped when this function leaves, however it leaves.
  dls::cli::owned_cluster cluster(cluster_file, state_dir, 0);
  int rc = 0;
  try {
    const auto st = rt::load_state(state_dir);
    rt::cluster_session s(rt::address_of(st));
    const double tau_max = YAML::LoadFile(cluster_file)["engine"]["threshold"].as<double>(0.9);
    const double capacity = measure_capacity(s, prompts, o.capacity_requests);
    const double rate = o.load * capacity;
    std::printf("capacity %.1f req/s (median of 3); offering %.2fx = %.1f req/s open loop for %.0f s\n", capacity,
                o.load, rate, o.duration_s);
    auto r = run_soak(s, st, prompts, rate, o, out);
    auto j = summarize(o, st, r, capacity, rate, tau_max);
    // The groups' own record, on each group's clock: when tau first went down, when the first refusal came.
    caf::scoped_actor self{s.system()};
    auto status = status_of(s, self);
    j["groups"] = json::array();
    if (status.is_object())
      for (auto& g : status["groups"])
        j["groups"].push_back({{"name", g.value("name", "")},
                               {"refused", g.value("refused", 0L)},
                               {"refused_at_placement", g.value("refused_at_placement", 0L)},
                               {"first_tau_lowered_s", g.value("first_tau_lowered_s", -1.0)},
                               {"first_refused_s", g.value("first_refused_s", -1.0)}});
    std::ofstream(out / "summary.json") << j.dump(2) << "\n";
    std::printf("\noffered %lu, accepted %lu, answered %lu, refused %lu (latency p50 %.1f ms, p99 %.1f ms), "
                "other errors %lu, %s %lu\n",
                j["offered"].get<unsigned long>(), j["accepted"].get<unsigned long>(),
                j["answered"].get<unsigned long>(), j["refused"].get<unsigned long>(),
                j["refusal_latency_ms"]["p50"].get<double>(), j["refusal_latency_ms"]["p99"].get<double>(),
                j["other_errors"].get<unsigned long>(), j.contains("lost") ? "lost" : "unanswered when interrupted",
                j.value("lost", j.value("unanswered_when_interrupted", 0UL)));
    std::printf("answer latency p50 %.1f ms, p99 %.1f ms\n", j["answer_latency_ms"]["p50"].get<double>(),
                j["answer_latency_ms"]["p99"].get<double>());
    for (auto& p : j["rss"])
      std::printf("%-12s RSS at %.0f s %ld KB, afterwards %ld..%ld KB (%+.1f %% / -%.1f %%): %s\n",
                  p["process"].get<std::string>().c_str(), p["ref_t_s"].get<double>(), p["ref_kb"].get<long>(),
                  p["min_kb"].get<long>(), p["max_kb"].get<long>(), p["above_ref_pct"].get<double>(),
                  p["below_ref_pct"].get<double>(), p["within_10pct"].get<bool>() ? "within 10 %" : "OUTSIDE 10 %");
    for (auto& g : j["groups"])
      std::printf("group %s: tau first lowered at %.3f s, its first refusal at %.3f s (group clock); refused %ld by "
                  "the group, %ld at placement\n",
                  g["name"].get<std::string>().c_str(), g["first_tau_lowered_s"].get<double>(),
                  g["first_refused_s"].get<double>(), g["refused"].get<long>(), g["refused_at_placement"].get<long>());
    std::printf("samples in %s, summary in %s\n", (out / "samples.csv").c_str(), (out / "summary.json").c_str());
    if (j.value("lost", uint64_t{0}) > 0 || j["other_errors"].get<uint64_t>() > 0) rc = 1;
    if (dls::cli::interrupted()) {
      std::printf("interrupted after %.0f s of load: the figures above cover that part only\n",
                  r.samples.empty() ? 0.0 : r.samples.back().t_s);
      rc = 130;
    }
  } catch (const std::exception& e) {
    std::cerr << "dilaserve: error: bench-soak: " << e.what() << "\n";
    rc = dls::cli::interrupted() ? 130 : 1;
  }
  return rc;
}

dls::cli::register_command reg{"bench-soak", [](CLI::App& app) {
  auto* sub = app.add_subcommand("bench-soak", "Overload soak: a multiple of the measured capacity, open loop, "
                                               "with memory, tau and refusals sampled (not for CI)");
  auto o = std::make_shared<soak_options>();
  sub->add_option("--config", o->config, "Cluster file to start (ports and paths are rewritten in the copy)")
      ->check(CLI::ExistingFile);
  sub->add_option("--policy", o->policy, "Policy set of the cluster (shedding is on for any)");
  sub->add_option("--duration", o->duration_s, "Seconds of offered load")->check(CLI::Range(1.0, 86400.0));
  sub->add_option("--load", o->load, "Offered load as a multiple of the measured capacity")
      ->check(CLI::Range(0.01, 100.0));
  sub->add_option("--sample-s", o->sample_s, "Seconds between samples")->check(CLI::Range(0.1, 600.0));
  sub->add_option("--rss-ref-s", o->rss_ref_s, "The RSS that later samples are compared with is taken at this time")
      ->check(CLI::Range(0.0, 86400.0));
  sub->add_option("--capacity-requests", o->capacity_requests, "Requests per capacity round")
      ->check(CLI::Range(10, 100000));
  sub->add_option("--slo-ms", o->slo_ms, "SLO of every soak request in ms (0: the cluster's deadline, slo_scale x solo latency)")
      ->check(CLI::Range(0, 3600000));
  sub->add_option("--drain-s", o->drain_s, "After the load, seconds to wait for the answers still owed")
      ->check(CLI::Range(1.0, 3600.0));
  sub->add_option("--seed", o->seed, "Seed of the arrival times");
  sub->add_option("--out", o->out, "Directory for cluster.yaml, state/, samples.csv and summary.json");
  return std::function<int()>([o] { return run_bench_soak(*o); });
}};

}  // namespace
