// `dilaserve submit`: one prompt (optionally streamed block by block) or a JSONL file
// of prompts at a given rate, with a progress bar and a summary.
#include "dilaserve/cluster_flags.hpp"
#include "dilaserve/command_registry.hpp"
#include "dilaserve/validators.hpp"
#include "dilaserve/progress.hpp"
#include "actors/request_admission.hpp"
#include "runtime/client.hpp"
#include "runtime/state_dir.hpp"
#include "runtime/submit_line.hpp"

#include <caf/scoped_actor.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iomanip>
#include <random>
#include <thread>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <sstream>

namespace rt = dls::runtime;
using json = nlohmann::json;
using clock_type = std::chrono::steady_clock;

namespace {

struct submit_options {
  dls::cli::cluster_flags cluster;
  std::string prompt, file;
  bool prompt_given = false;  // `--prompt ''` is an empty prompt, not a missing flag
  double threshold = -1;
  double min_threshold = -1;
  std::string on_miss = "serve";
  int slo_ms = 0;
  int gen_length = 0;
  double rate = 0;  // requests per second; 0 = all at once
  bool stream = false;
  bool json_out = false;
  int timeout_s = 600;
  int head_grace_ms = -1;  // -1: the cluster file's heartbeat.head_grace_ms, else its default
  // Dream's sampler options; unset (negative, empty): the cluster's engine.* settings.
  double top_p = -1;
  int top_k = -1;
  double alg_temp = -1;
  std::string schedule;
  double eps = -1;
  // The commit rule and its steps per block; unset: engine.commit and engine.steps_per_block.
  std::string rule;
  int steps_per_block = -1;
};

// Between attempts to reach a head that is being restarted: a closed port refuses at once, so
// this only bounds how often the client knocks (a restart takes about a second).
constexpr auto reconnect_interval = std::chrono::milliseconds(200);

// A name for this client's requests that no other client picks (128 random bits): the head
// re-attaches a resubmitted key to its request instead of starting it again.
std::string client_key_prefix() {
  std::random_device rd;
  std::ostringstream out;
  for (int i = 0; i < 4; ++i) out << std::hex << std::setw(8) << std::setfill('0') << rd();
  return out.str();
}

// How long to wait for a lost head to come back: the flag, else the recorded cluster file's.
int head_grace_ms(const submit_options& o) {
  if (o.head_grace_ms >= 0) return o.head_grace_ms;
  if (o.cluster.address.empty()) {
    try {
      auto st = rt::load_state(rt::resolve_state_dir(o.cluster.state_dir));
      return rt::load_cluster_config(st.config_file).head_grace_ms;
    } catch (const std::exception&) {
      // No usable cluster file here: the default below.
    }
  }
  return rt::cluster_config{}.head_grace_ms;
}

struct job {
  rt::submit_spec spec;
  std::vector<std::string> valid;  // acceptable answers, when the file gives them
  int line = 0;                    // in --file, for messages
  double at_s = -1;                // send time after the first send, when the file gives one
};

json answer_json(const rt::answer& a) {
  json j{{"request_id", a.request_id}, {"ok", a.ok},         {"text", a.text},   {"latency_ms", a.latency_ms},
         {"steps", a.steps},           {"tokens", a.tokens}, {"node", a.node},   {"group", a.group},
         {"threshold", a.threshold},   {"slo_met", a.slo_met}, {"moves", a.moves}};
  j["tokens_per_step"] = a.steps ? static_cast<double>(a.tokens) / a.steps : 0.0;
  if (a.deadline_ms > 0) j["deadline_ms"] = a.deadline_ms;
  j["outcome"] = a.ok ? "answered" : "failed";
  if (!a.ok) j["error"] = a.error;
  return j;
}

std::vector<job> read_jobs(const submit_options& o) {
  std::vector<job> jobs;
  auto base = [&] {
    rt::submit_spec s;
    s.threshold = o.threshold;
    s.min_threshold = o.min_threshold;
    s.reject_on_miss = o.on_miss == "reject";
    s.slo_ms = o.slo_ms;
    s.gen_length = o.gen_length;
    s.top_p = o.top_p;
    s.top_k = o.top_k;
    s.alg_temp = o.alg_temp;
    if (!o.schedule.empty()) s.schedule = static_cast<int32_t>(dls::common::parse_step_schedule(o.schedule));
    s.eps = o.eps;
    if (!o.rule.empty()) s.rule = static_cast<int32_t>(dls::common::parse_commit_rule(o.rule));
    s.steps_per_block = o.steps_per_block;
    return s;
  };
  if (o.file.empty()) {
    job j;
    j.spec = base();
    j.spec.prompt = o.prompt;
    j.spec.stream = o.stream;
    jobs.push_back(j);
    return jobs;
  }
  std::ifstream in(o.file);
  if (!in) throw std::runtime_error("cannot open " + o.file);
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    auto where = o.file + ":" + std::to_string(lineno) + ": ";
    auto parsed = rt::parse_submit_line(line, base(), where);
    if (!parsed) continue;
    job j;
    j.line = lineno;
    j.spec = std::move(parsed->spec);
    j.valid = std::move(parsed->valid);
    j.at_s = parsed->at_s;
    jobs.push_back(std::move(j));
  }
  if (jobs.empty()) throw std::runtime_error(o.file + ": no prompts");
  // Send times replay a trace: all lines give one, in order, or none does.
  const bool timed = jobs.front().at_s >= 0;
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    auto where = o.file + ":" + std::to_string(jobs[i].line) + ": ";
    if ((jobs[i].at_s >= 0) != timed)
      throw std::runtime_error(where + "\"at_s\" must be given on every line or on none");
    if (i > 0 && jobs[i].at_s < jobs[i - 1].at_s)
      throw std::runtime_error(where + "\"at_s\" must not decrease from one line to the next");
  }
  if (timed && o.rate > 0) throw std::runtime_error(o.file + ": --rate and \"at_s\" in the file exclude each other");
  return jobs;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  auto idx = static_cast<std::size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(idx, v.size() - 1)];
}

// The cluster file `up` recorded gives this client the cluster's limits and model, so a
// request the head would refuse is refused here before it is sent. Without one (--address),
// only what needs no configuration is checked here, and the head checks the rest.
std::shared_ptr<const rt::request_checker> client_checker(const submit_options& o) {
  if (o.cluster.address.empty()) {
    try {
      auto st = rt::load_state(rt::resolve_state_dir(o.cluster.state_dir));
      return dls::actors::make_request_checker(rt::load_cluster_config(st.config_file));
    } catch (const std::exception&) {
      // No usable cluster file here: the connection attempt reports the real problem.
    }
  }
  rt::request_limits unknown;
  unknown.max_prompt_bytes = std::numeric_limits<int64_t>::max();
  return std::make_shared<const rt::request_checker>(unknown, 0, rt::model_bounds{});
}

void check_jobs(const submit_options& o, const std::vector<job>& jobs) {
  auto checker = client_checker(o);
  for (const auto& j : jobs) {
    auto why = checker->check(j.spec.prompt, j.spec.threshold, j.spec.gen_length);
    if (why.empty()) continue;
    throw std::runtime_error(o.file.empty() ? why : o.file + ":" + std::to_string(j.line) + ": " + why);
  }
}

int run_submit(const submit_options& o) {
  if (o.prompt_given == !o.file.empty()) throw std::runtime_error("give exactly one of --prompt TEXT or --file F");
  auto jobs = read_jobs(o);
  check_jobs(o, jobs);
  rt::cluster_session session(o.cluster.find());
  caf::scoped_actor self{session.system()};
  std::map<uint64_t, rt::answer> answers;
  dls::cli::progress_bar bar("submit", jobs.size(), !o.file.empty() && !o.json_out);
  auto start = clock_type::now();
  auto deadline = start + std::chrono::seconds(o.timeout_s);
  std::size_t sent = 0;
  std::string failure;
  // When job i is due: its own send time, else evenly at --rate, else at once.
  auto due_of = [&](std::size_t i) {
    double at = jobs[i].at_s >= 0 ? jobs[i].at_s : o.rate > 0 ? static_cast<double>(i) / o.rate : 0.0;
    return start + std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(at));
  };
  const auto key_prefix = client_key_prefix();
  const int grace_ms = head_grace_ms(o);
  // A head that dies (or, through BASP's connection timeout, hangs) is noticed at once: the
  // client reconnects within the grace window and submits every unanswered request again
  // under its key, which re-attaches it at the restarted head; otherwise it fails at once.
  self->monitor(session.head());
  auto reconnect = [&](const std::string& why) {
    if (grace_ms <= 0) {
      failure = why;
      return;
    }
    auto until = std::min(deadline, clock_type::now() + std::chrono::milliseconds(grace_ms));
    std::string last;
    for (;;) {
      try {
        session.reconnect();
        break;
      } catch (const std::exception& e) {
        last = e.what();
      }
      if (clock_type::now() + reconnect_interval >= until) {
        failure = why + "; no head came back within " + std::to_string(grace_ms) + " ms (" + last + ")";
        return;
      }
      std::this_thread::sleep_for(reconnect_interval);
    }
    self->monitor(session.head());
    std::size_t again = 0;
    for (std::size_t i = 0; i < sent; ++i) {
      if (answers.count(i)) continue;
      auto spec = jobs[i].spec;
      spec.tag = i;
      spec.key = key_prefix + "-" + std::to_string(i);
      spec.client = caf::actor_cast<caf::actor>(self);
      self->send(session.head(), rt::submit_atom::value, std::move(spec));
      ++again;
    }
    if (!o.json_out)
      std::cerr << "dilaserve: " << why << "; reconnected, re-attached " << again << " requests\n";
  };
  while (answers.size() < jobs.size() && failure.empty()) {
    // Send every job whose time has come (all at once without --rate).
    auto now = clock_type::now();
    while (sent < jobs.size()) {
      if (due_of(sent) > now) break;
      auto spec = jobs[sent].spec;
      spec.tag = sent;
      spec.key = key_prefix + "-" + std::to_string(sent);
      spec.client = caf::actor_cast<caf::actor>(self);
      self->send(session.head(), rt::submit_atom::value, std::move(spec));
      ++sent;
    }
    auto wake = deadline;
    if (sent < jobs.size()) wake = std::min(wake, due_of(sent));
    auto wait = std::max<clock_type::duration>(wake - clock_type::now(), clock_type::duration::zero());
    self->receive(
        [&](rt::block_chunk& c) {
          if (o.stream && !o.json_out) std::cout << c.text << std::flush;
        },
        [&](rt::answer& a) {
          answers[a.tag] = a;
          bar.advance(1, a.ok ? "" : "error");
        },
        [&](caf::error& e) {
          // A submit sent as the head's connection broke comes back as request_receiver_down,
          // often before the monitor's down message: handled as the head lost. Should the head
          // still be there, the reconnect finds it and the unanswered requests re-attach by key.
          if (e == caf::sec::request_receiver_down) {
            reconnect("lost the head (" + session.system().render(e) + ")");
            return;
          }
          failure = session.system().render(e);
        },
        [&](caf::down_msg& dm) {
          if (dm.source == session.head().address())
            reconnect("lost the head (" + session.system().render(dm.reason) + ")");
        },
        caf::after(std::chrono::duration_cast<std::chrono::milliseconds>(wait)) >> [&] {
          if (clock_type::now() >= deadline) failure = "timed out after " + std::to_string(o.timeout_s) + " s";
        });
  }
  bar.finish();
  if (!failure.empty() && o.json_out && !o.file.empty()) {
    // What happened to each request, for callers that count outcomes under faults.
    json results = json::array();
    int ok = 0, failed = 0;
    for (std::size_t i = 0; i < jobs.size(); ++i) {
      json row;
      if (auto it = answers.find(i); it != answers.end()) {
        row = answer_json(it->second);
        ++(it->second.ok ? ok : failed);
      } else {
        row = {{"ok", false}, {"outcome", i < sent ? "no answer" : "not sent"}};
      }
      row["prompt"] = jobs[i].spec.prompt;
      results.push_back(row);
    }
    json summary{{"requests", jobs.size()}, {"sent", sent},     {"ok", ok},
                 {"failed", failed},        {"unanswered", sent - answers.size()}, {"error", failure}};
    std::cout << json{{"summary", summary}, {"results", results}}.dump() << "\n";
  }
  if (!failure.empty())
    throw std::runtime_error("submit: " + failure + " (" + std::to_string(answers.size()) + " of " +
                             std::to_string(jobs.size()) + " answered)");
  double wall = std::chrono::duration<double>(clock_type::now() - start).count();
  if (o.file.empty()) {
    auto& a = answers.begin()->second;
    if (o.json_out) {
      std::cout << answer_json(a).dump() << "\n";
    } else if (!a.ok) {
      std::cerr << "dilaserve: error: request " << a.request_id << " failed: " << a.error << "\n";
    } else {
      std::cout << (o.stream ? "\n" : a.text + "\n");
      char slo[64] = "";
      if (a.deadline_ms > 0)
        std::snprintf(slo, sizeof slo, ", SLO %.1f ms %s", a.deadline_ms, a.slo_met ? "met" : "missed");
      std::printf("latency %.1f ms, %d steps, %.2f tokens/step, tau %.2f, ran on %s (node %s)%s%s\n", a.latency_ms,
                  a.steps, a.steps ? static_cast<double>(a.tokens) / a.steps : 0.0, a.threshold, a.group.c_str(),
                  a.node.c_str(), a.moves ? (", moved " + std::to_string(a.moves) + "x").c_str() : "", slo);
    }
    return a.ok ? 0 : 1;
  }
  int ok = 0, correct = 0, graded = 0, slo_met = 0;
  std::vector<double> lat;
  double tps = 0;
  json results = json::array();
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    auto& a = answers[i];
    auto row = answer_json(a);
    row["prompt"] = jobs[i].spec.prompt;
    if (a.ok) {
      ++ok;
      lat.push_back(a.latency_ms);
      tps += a.steps ? static_cast<double>(a.tokens) / a.steps : 0.0;
      if (a.slo_met) ++slo_met;
    }
    if (!jobs[i].valid.empty()) {
      ++graded;
      bool right = a.ok && std::find(jobs[i].valid.begin(), jobs[i].valid.end(), a.text) != jobs[i].valid.end();
      correct += right;
      row["correct"] = right;
    }
    results.push_back(row);
  }
  json summary{{"requests", jobs.size()},
               {"sent", sent},
               {"ok", ok},
               {"failed", static_cast<int>(jobs.size()) - ok},
               {"wall_s", wall},
               {"throughput_rps", static_cast<double>(jobs.size()) / wall},
               {"latency_p50_ms", percentile(lat, 0.5)},
               {"latency_p99_ms", percentile(lat, 0.99)},
               {"tokens_per_step", ok ? tps / ok : 0.0},
               {"slo_attainment", ok ? static_cast<double>(slo_met) / static_cast<double>(jobs.size()) : 0.0}};
  if (graded) summary["accuracy"] = static_cast<double>(correct) / graded;
  if (o.json_out) {
    std::cout << json{{"summary", summary}, {"results", results}}.dump() << "\n";
  } else {
    std::printf("%zu requests in %.2f s (%.2f req/s): %d ok, %zu failed\n", jobs.size(), wall,
                static_cast<double>(jobs.size()) / wall, ok, jobs.size() - static_cast<std::size_t>(ok));
    std::printf("latency p50 %.1f ms, p99 %.1f ms; %.2f tokens/step", percentile(lat, 0.5), percentile(lat, 0.99),
                ok ? tps / ok : 0.0);
    if (graded) std::printf("; accuracy %d/%d = %.3f", correct, graded, static_cast<double>(correct) / graded);
    if (o.slo_ms > 0) std::printf("; SLO met %d/%zu", slo_met, jobs.size());
    std::printf("\n");
  }
  return ok == static_cast<int>(jobs.size()) ? 0 : 1;
}

dls::cli::register_command reg{"submit", [](CLI::App& app) {
  auto* sub = app.add_subcommand("submit", "Submit a prompt (or a JSONL file of prompts) to the cluster");
  auto o = std::make_shared<submit_options>();
  sub->add_option("--prompt", o->prompt, "Prompt text");
  sub->add_option("--file", o->file, "JSONL file: one {\"prompt\": ..., [\"answer\"|\"valid\", \"threshold\", \"at_s\" (send time), \"top_p\", "
                  "\"top_k\", \"alg_temp\", \"schedule\", \"eps\"]} per line");
  sub->add_option("--threshold", o->threshold,
                  "Pin the confidence threshold tau: the scheduler never changes it (default: the policy sets it)")
      ->check(dls::cli::unit_interval);
  sub->add_option("--on-miss", o->on_miss,
                  "reject: a strict SLO, refused at once if it cannot be met; serve: answered late (default)")
      ->check(CLI::IsMember({"serve", "reject"}));
  sub->add_option("--min-threshold", o->min_threshold, "Lowest tau the scheduler may choose for these requests")
      ->check(dls::cli::unit_interval);
  sub->add_option("--slo-ms", o->slo_ms, "Latency objective in milliseconds")->check(dls::cli::non_negative);
  sub->add_option("--gen-length", o->gen_length, "Answer length in tokens (default: the cluster's)")
      ->check(dls::cli::non_negative);
  sub->add_option("--rate", o->rate, "Requests per second for --file (default: all at once)")
      ->check(dls::cli::non_negative);
  sub->add_option("--top-p", o->top_p, "Dream's top-p for these requests, in (0, 1] (default: engine.top_p)")
      ->check(dls::cli::nucleus);
  sub->add_option("--top-k", o->top_k, "Dream's top-k for these requests, 0 = off (default: engine.top_k)")
      ->check(dls::cli::non_negative);
  sub->add_option("--alg-temp", o->alg_temp,
                  "Dream's alg_temp for these requests, >= 0 (quota, margin, entropy; default: engine.alg_temp)")
      ->check(dls::cli::non_negative);
  sub->add_option("--schedule", o->schedule, "even or dream_linear for these requests (default: engine.schedule)")
      ->check(CLI::IsMember({"even", "dream_linear"}));
  sub->add_option("--eps", o->eps,
                  "Dream's eps for these requests, in [0, 1): the last timestep of dream_linear and origin (default: "
                  "engine.eps)")
      ->check(dls::cli::last_timestep);
  sub->add_option("--rule", o->rule,
                  "Commit rule for these requests: threshold, quota, factor, or Dream's margin, entropy or origin "
                  "(default: engine.commit)")
      ->check(CLI::IsMember({"threshold", "quota", "factor", "margin", "entropy", "origin"}));
  sub->add_option("--steps-per-block", o->steps_per_block,
                  "Steps a block of quota, margin, entropy or origin takes for these requests, 0 = the block length "
                  "(default: engine.steps_per_block)")
      ->check(CLI::Range(0, dls::common::max_steps_per_block));
  sub->add_flag("--stream", o->stream, "Print each block as soon as it is final");
  sub->add_option("--timeout", o->timeout_s, "Give up after this many seconds");
  sub->add_option("--head-grace-ms", o->head_grace_ms,
                  "How long to wait for a lost head to come back and re-attach (default: the cluster file's "
                  "heartbeat.head_grace_ms; 0: fail at once)")
      ->check(dls::cli::non_negative);
  o->cluster.add_to(sub);
  sub->add_flag("--json", o->json_out, "Print JSON");
  auto* prompt_flag = sub->get_option("--prompt");
  return std::function<int()>([o, prompt_flag] {
    o->prompt_given = prompt_flag->count() > 0;
    return run_submit(*o);
  });
}};

}  // namespace
