#include "dilaserve/bench_replay.hpp"

#include "dilaserve/bench_cluster.hpp"

#include <caf/scoped_actor.hpp>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <memory>
#include <chrono>
#include <mutex>
#include <regex>
#include <stdexcept>
#include <thread>

namespace dls::cli {

namespace rt = dls::runtime;
using clock_type = std::chrono::steady_clock;
using json = nlohmann::json;

namespace {

double seconds_between(clock_type::time_point a, clock_type::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

clock_type::time_point at(clock_type::time_point start, double s) {
  return start + std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(s));
}

// How often a wait wakes to look at the interrupt flag.
constexpr auto interrupt_poll = std::chrono::milliseconds(50);

}  // namespace

std::vector<replay_outcome> replay_caf(rt::cluster_session& session, const replay_plan& plan,
                                       const std::vector<gpu::eval_problem>& problems) {
  const auto& reqs = plan.requests;
  std::vector<replay_outcome> out(reqs.size());
  std::vector<char> answered(reqs.size(), 0);
  caf::scoped_actor self{session.system()};
  self->monitor(session.head());
  const auto start = clock_type::now();
  const double t0 = reqs.empty() ? 0.0 : reqs.front().t;
  auto due = [&](std::size_t i) { return at(start, (reqs[i].t - t0) * plan.time_scale); };
  const auto last_due = reqs.empty() ? start : due(reqs.size() - 1);
  const auto deadline = at(last_due, plan.timeout_s);
  std::size_t sent = 0, done = 0;
  std::string failure;
  while (done < reqs.size() && failure.empty()) {
    throw_if_interrupted();
    const auto now = clock_type::now();
    while (sent < reqs.size() && due(sent) <= now) {
      const auto& p = problems[reqs[sent].problem];
      rt::submit_spec spec;
      spec.prompt = p.prompt;
      spec.gen_length = p.gen_length;
      spec.tag = sent;
      out[sent].send_lag_s = seconds_between(due(sent), clock_type::now());
      self->send(session.head(), rt::submit_atom::value, std::move(spec));
      ++sent;
    }
    auto wake = std::min(deadline, clock_type::now() + interrupt_poll);
    if (sent < reqs.size()) wake = std::min(wake, due(sent));
    const auto wait = std::max<clock_type::duration>(wake - clock_type::now(), clock_type::duration::zero());
    self->receive(
        [&](rt::answer& a) {
          if (a.tag >= reqs.size() || answered[a.tag]) return;
          answered[a.tag] = 1;
          ++done;
          auto& o = out[a.tag];
          o.ok = a.ok;
          o.error = a.error;
          o.text = a.text;
          o.latency_s = a.latency_ms / 1e3;
          o.client_latency_s = seconds_between(due(a.tag), clock_type::now());
          o.slo_met = a.ok && a.slo_met;
          o.steps = a.steps;
          o.tokens = a.tokens;
          o.moves = a.moves;
          if (plan.on_answer) plan.on_answer();
        },
        [&](rt::block_chunk&) {},
        [&](caf::error& e) { failure = session.system().render(e); },
        [&](caf::down_msg& dm) { failure = "lost the head (" + session.system().render(dm.reason) + ")"; },
        caf::after(std::chrono::duration_cast<std::chrono::milliseconds>(wait)) >> [&] {
          if (clock_type::now() >= deadline)
            failure = "timed out " + std::to_string(static_cast<int>(plan.timeout_s)) + " s after the last arrival";
        });
  }
  if (!failure.empty())
    throw std::runtime_error(failure + " (" + std::to_string(done) + " of " + std::to_string(reqs.size()) +
                             " answered)");
  return out;
}

http_endpoint parse_http_url(const std::string& url) {
  static const std::regex re(R"(http://([^/:]+|\[[^\]]+\]):([0-9]{1,5})(/.*)?)");
  std::smatch m;
  if (!std::regex_match(url, m, re))
    throw std::invalid_argument("--http: '" + url + "' is not http://HOST:PORT[/PATH]");
  http_endpoint ep;
  ep.host = m[1].str();
  ep.port = std::stoi(m[2].str());
  if (ep.port < 1 || ep.port > 65535) throw std::invalid_argument("--http: port " + m[2].str() + " is out of range");
  ep.base_path = m[3].matched && m[3].str() != "/" ? m[3].str() : "/v1";
  while (ep.base_path.size() > 1 && ep.base_path.back() == '/') ep.base_path.pop_back();
  return ep;
}

namespace {

// One streamed completion; fills `o` from the SSE events (OpenAI chunks, then [DONE]).
void stream_one(httplib::Client& c, const http_endpoint& ep, const gpu::eval_problem& p,
                clock_type::time_point scheduled, replay_outcome& o) {
  json body{{"model", ep.model}, {"prompt", p.prompt}, {"stream", true}};
  if (p.gen_length > 0) body["gen_length"] = p.gen_length;
  httplib::Request req;
  req.method = "POST";
  req.path = ep.base_path + "/completions";
  req.headers = {{"Content-Type", "application/json"}, {"Accept", "text/event-stream"}};
  req.body = body.dump();
  std::string pending;
  bool done = false;
  // SSE framing: events end with a blank line; only `data:` lines carry payloads, `:` lines
  // are comments (the gateway's keep-alives).
  auto on_event = [&](const std::string& data) {
    if (data == "[DONE]") {
      done = true;
      return;
    }
    auto j = json::parse(data, nullptr, false);
    if (!j.is_object()) {
      o.error = "unparseable SSE event";
      return;
    }
    if (j.contains("error")) {
      o.error = j["error"].value("message", "error event");
      return;
    }
    const auto& ch = j.value("choices", json::array());
    if (!ch.empty() && ch[0].is_object()) {
      const auto piece = ch[0].value("text", "");
      if (!piece.empty() && o.first_block_s == 0) o.first_block_s = seconds_between(scheduled, clock_type::now());
      o.text += piece;
    }
    if (j.contains("dilaserve") && j["dilaserve"].is_object()) {
      const auto& d = j["dilaserve"];
      o.latency_s = d.value("latency_ms", 0.0) / 1e3;
      o.steps = d.value("steps", 0);
      o.tokens = d.value("tokens", 0);
      o.moves = d.value("moves", 0);
      o.slo_met = d.value("deadline_met", false);
    }
  };
  req.content_receiver = [&](const char* data, std::size_t len, uint64_t, uint64_t) {
    pending.append(data, len);
    for (std::size_t end; (end = pending.find("\n\n")) != std::string::npos;) {
      const auto event = pending.substr(0, end);
      pending.erase(0, end + 2);
      std::size_t pos = 0;
      while (pos < event.size()) {
        auto nl = event.find('\n', pos);
        auto line = event.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
        pos = nl == std::string::npos ? event.size() : nl + 1;
        if (line.rfind("data: ", 0) == 0) on_event(line.substr(6));
      }
    }
    return true;
  };
  bool any_byte = false;
  auto receiver = req.content_receiver;
  req.content_receiver = [&](const char* data, std::size_t len, uint64_t off, uint64_t total) {
    any_byte = true;
    return receiver(data, len, off, total);
  };
  auto r = c.send(req);
  if (!r && !any_byte &&
      (r.error() == httplib::Error::Read || r.error() == httplib::Error::Write ||
       r.error() == httplib::Error::Connection)) {
    // Nothing came back, so the gateway never started this request: send it once more.
    o.retried = true;
    r = c.send(req);
  }
  o.client_latency_s = seconds_between(scheduled, clock_type::now());
  if (!r) {
    o.error = "HTTP: " + httplib::to_string(r.error());
  } else if (r->status != 200) {
    auto j = json::parse(r->body, nullptr, false);
    o.error = "HTTP " + std::to_string(r->status) +
              (j.is_object() && j.contains("error") ? ": " + j["error"].value("message", "") : std::string());
  } else if (!done && o.error.empty()) {
    o.error = "the stream ended without [DONE]";
  }
  o.ok = o.error.empty();
  if (!o.ok) o.slo_met = false;
}

}  // namespace

std::vector<replay_outcome> replay_http(const http_endpoint& ep, const replay_plan& plan,
                                        const std::vector<gpu::eval_problem>& problems, int connections) {
  const auto& reqs = plan.requests;
  std::vector<replay_outcome> out(reqs.size());
  clock_type::time_point start;  // set once the connections are open
  const double t0 = reqs.empty() ? 0.0 : reqs.front().t;
  auto due = [&](std::size_t i) { return at(start, (reqs[i].t - t0) * plan.time_scale); };
  std::atomic<std::size_t> next{0};
  std::mutex progress_mu;
  const auto read_timeout = std::chrono::duration<double>(
      plan.timeout_s + (reqs.empty() ? 0.0 : (reqs.back().t - t0) * plan.time_scale));
  std::vector<std::thread> pool;
  const auto n_threads = std::min<std::size_t>(static_cast<std::size_t>(std::max(1, connections)), reqs.size());
  // Connections opened one at a time before the replay, so that its first burst does not
  // overrun the server's listen queue.
  std::vector<std::unique_ptr<httplib::Client>> clients;
  for (std::size_t k = 0; k < n_threads; ++k) {
    auto c = std::make_unique<httplib::Client>(ep.host, ep.port);
    c->set_keep_alive(true);
    c->set_tcp_nodelay(true);
    c->set_read_timeout(std::chrono::duration_cast<std::chrono::seconds>(read_timeout) + std::chrono::seconds(1));
    c->set_default_headers({{"Authorization", "Bearer " + ep.key}});
    auto r = c->Get(ep.base_path + "/models");
    if (!r) throw std::runtime_error("--http: cannot connect to " + ep.host + ":" + std::to_string(ep.port) + " (" +
                                     httplib::to_string(r.error()) + ")");
    clients.push_back(std::move(c));
    throw_if_interrupted();
  }
  start = clock_type::now();
  for (std::size_t k = 0; k < n_threads; ++k)
    pool.emplace_back([&, k] {
      auto& c = *clients[k];
      for (std::size_t i; (i = next++) < reqs.size();) {
        // Open loop: wait for the request's arrival time (in short slices, for interrupts).
        while (!interrupted() && clock_type::now() < due(i))
          std::this_thread::sleep_until(std::min(due(i), clock_type::now() + interrupt_poll));
        if (interrupted()) {
          out[i].error = "interrupted";
          continue;
        }
        out[i].send_lag_s = seconds_between(due(i), clock_type::now());
        stream_one(c, ep, problems[reqs[i].problem], due(i), out[i]);
        std::lock_guard<std::mutex> lk(progress_mu);
        if (plan.on_answer) plan.on_answer();
      }
    });
  for (auto& t : pool) t.join();
  throw_if_interrupted();
  return out;
}

}  // namespace dls::cli
