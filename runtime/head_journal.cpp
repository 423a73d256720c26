#include "runtime/head_journal.hpp"

#include "runtime/log.hpp"
#include "runtime/ucx_seal.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>

namespace dls::runtime {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::string to_cbor(const json& j) {
  auto bytes = json::to_cbor(j);
  return {bytes.begin(), bytes.end()};
}

json binary_of(const std::vector<char>& v) {
  return json::binary(std::vector<std::uint8_t>(v.begin(), v.end()));
}

std::vector<char> chars_of(const json& j) {
  const auto& b = j.get_binary();
  return {b.begin(), b.end()};
}

void keep_finished(journal_state& st, std::string key, answer a, std::size_t kept) {
  if (key.empty()) return;
  st.finished.emplace_back(std::move(key), std::move(a));
  while (st.finished.size() > kept) st.finished.pop_front();
}

json answer_json(const answer& a) {
  return {{"ok", a.ok},         {"error", a.error},     {"text", a.text},       {"latency_ms", a.latency_ms},
          {"steps", a.steps},   {"tokens", a.tokens},   {"tau", a.threshold},   {"slo_met", a.slo_met},
          {"node", a.node},     {"group", a.group},     {"moves", a.moves},     {"tag", a.tag},
          {"request_id", a.request_id}, {"deadline_ms", a.deadline_ms}};
}

answer answer_of(const json& j) {
  answer a;
  a.ok = j.at("ok").get<bool>();
  a.error = j.at("error").get<std::string>();
  a.text = j.at("text").get<std::string>();
  a.latency_ms = j.at("latency_ms").get<double>();
  a.steps = j.at("steps").get<int32_t>();
  a.tokens = j.at("tokens").get<int32_t>();
  a.threshold = j.at("tau").get<double>();
  a.slo_met = j.at("slo_met").get<bool>();
  a.node = j.at("node").get<std::string>();
  a.group = j.at("group").get<std::string>();
  a.moves = j.at("moves").get<int32_t>();
  a.tag = j.at("tag").get<uint64_t>();
  a.request_id = j.at("request_id").get<uint64_t>();
  a.deadline_ms = j.value("deadline_ms", 0.0);  // absent from logs written before it was kept
  return a;
}

void apply_accepted(journal_state& st, journal_request r) {
  st.next_id = std::max(st.next_id, r.id + 1);
  if (!r.key.empty()) st.live_by_key[r.key] = r.id;
  auto id = r.id;
  st.live[id] = std::move(r);
}

void apply_snapshot(journal_state& st, uint64_t id, const std::vector<char>& canvas, int32_t steps, int32_t tokens) {
  auto it = st.live.find(id);
  if (it == st.live.end()) return;  // it finished before this snapshot was written
  it->second.canvas = canvas;
  it->second.steps = steps;
  it->second.tokens = tokens;
}

void apply_finished(journal_state& st, uint64_t id, std::string key, answer a, std::size_t kept) {
  if (auto it = st.live.find(id); it != st.live.end()) {
    if (!it->second.key.empty()) st.live_by_key.erase(it->second.key);
    st.live.erase(it);
  }
  st.next_id = std::max(st.next_id, id + 1);
  keep_finished(st, std::move(key), std::move(a), kept);
}

std::string prepare_log(const std::string& dir, bool recover) {
  fs::create_directories(dir);
  auto path = (fs::path(dir) / "head.wal").string();
  if (!recover && fs::exists(path)) {
    // A fresh head (`up`, or `start --head` without --recover) starts an empty log; the old
    // one stays readable next to it until the next fresh start.
    fs::rename(path, path + ".prev");
    log_line("wal", "started a new log " + path + " (the previous one is " + path + ".prev)");
  }
  return path;
}

}  // namespace

std::string encode_accepted(const journal_request& r) {
  const auto& s = r.spec;
  return to_cbor({{"t", "accept"},
                  {"id", r.id},
                  {"key", r.key},
                  {"prompt", s.prompt},
                  {"tau", s.threshold},
                  {"min_tau", s.min_threshold},
                  {"reject_on_miss", s.reject_on_miss},
                  {"slo_ms", s.slo_ms},
                  {"gen", s.gen_length},
                  {"stream", s.stream},
                  {"tag", s.tag},
                  {"arrival", r.arrival_unix_ms},
                  {"canvas", binary_of(r.canvas)},
                  {"steps", r.steps},
                  {"tokens", r.tokens},
                  {"top_p", s.top_p},
                  {"top_k", s.top_k},
                  {"alg_temp", s.alg_temp},
                  {"schedule", s.schedule},
                  {"eps", s.eps},
                  {"rule", s.rule},
                  {"steps_per_block", s.steps_per_block}});
}

std::string encode_snapshot(uint64_t id, const std::vector<char>& canvas, int32_t steps, int32_t tokens) {
  return to_cbor({{"t", "snap"}, {"id", id}, {"canvas", binary_of(canvas)}, {"steps", steps}, {"tokens", tokens}});
}

std::string encode_finished(uint64_t id, const std::string& key, const answer& a) {
  // Only a keyed request's answer is ever read back (a client re-attaching by its key).
  if (key.empty()) return to_cbor({{"t", "done"}, {"id", id}, {"key", key}});
  return to_cbor({{"t", "done"}, {"id", id}, {"key", key}, {"answer", answer_json(a)}});
}

std::string encode_joined(const std::string& node, uint32_t joins) {
  return to_cbor({{"t", "join"}, {"node", node}, {"joins", joins}});
}

std::string encode_layout(const std::string& node, const std::vector<int32_t>& sizes) {
  return to_cbor({{"t", "layout"}, {"node", node}, {"sizes", sizes}});
}

std::string encode_policy(const std::string& name) { return to_cbor({{"t", "policy"}, {"name", name}}); }

std::string encode_slo_overhead(double ms) { return to_cbor({{"t", "slo_overhead"}, {"ms", ms}}); }

std::string encode_data_key(const std::string& key) {
  return to_cbor({{"t", "data_key"}, {"key", json::binary(std::vector<std::uint8_t>(key.begin(), key.end()))}});
}

std::string encode_port(int port) { return to_cbor({{"t", "port"}, {"port", port}}); }

void apply_record(journal_state& st, const std::string& payload, std::size_t finished_kept) {
  json j;
  try {
    j = json::from_cbor(payload.begin(), payload.end());
  } catch (const json::exception& e) {
    throw journal_error(std::string("not a CBOR record (") + e.what() + ")");
  }
  try {
    if (!j.is_object()) throw journal_error("a record must be a CBOR map");
    auto type = j.at("t").get<std::string>();
    if (type == "accept") {
      journal_request r;
      r.id = j.at("id").get<uint64_t>();
      if (r.id == 0) throw journal_error("request id 0");
      r.key = j.at("key").get<std::string>();
      r.spec.prompt = j.at("prompt").get<std::string>();
      r.spec.threshold = j.at("tau").get<double>();
      r.spec.min_threshold = j.at("min_tau").get<double>();
      r.spec.reject_on_miss = j.value("reject_on_miss", false);  // absent in journals written before it
      // Absent in journals written before per-request sampler options: the cluster's.
      r.spec.top_p = j.value("top_p", -1.0);
      r.spec.top_k = j.value("top_k", int32_t{-1});
      r.spec.alg_temp = j.value("alg_temp", -1.0);
      r.spec.schedule = j.value("schedule", int32_t{-1});
      r.spec.eps = j.value("eps", -1.0);
      // Absent in journals written before per-request commit rules: the cluster's.
      r.spec.rule = j.value("rule", int32_t{-1});
      r.spec.steps_per_block = j.value("steps_per_block", int32_t{-1});
      r.spec.slo_ms = j.at("slo_ms").get<int32_t>();
      r.spec.gen_length = j.at("gen").get<int32_t>();
      r.spec.stream = j.at("stream").get<bool>();
      r.spec.tag = j.at("tag").get<uint64_t>();
      r.spec.key = r.key;
      r.arrival_unix_ms = j.at("arrival").get<int64_t>();
      r.canvas = chars_of(j.at("canvas"));
      r.steps = j.at("steps").get<int32_t>();
      r.tokens = j.at("tokens").get<int32_t>();
      apply_accepted(st, std::move(r));
    } else if (type == "snap") {
      apply_snapshot(st, j.at("id").get<uint64_t>(), chars_of(j.at("canvas")), j.at("steps").get<int32_t>(),
                     j.at("tokens").get<int32_t>());
    } else if (type == "done") {
      auto id = j.at("id").get<uint64_t>();
      auto key = j.at("key").get<std::string>();
      auto a = key.empty() ? answer{} : answer_of(j.at("answer"));
      apply_finished(st, id, std::move(key), std::move(a), finished_kept);
    } else if (type == "join") {
      st.joins[j.at("node").get<std::string>()] = j.at("joins").get<uint32_t>();
    } else if (type == "layout") {
      st.layouts[j.at("node").get<std::string>()] = j.at("sizes").get<std::vector<int32_t>>();
    } else if (type == "policy") {
      st.policy = j.at("name").get<std::string>();
    } else if (type == "slo_overhead") {
      const auto ms = j.at("ms").get<double>();
      if (!(ms >= 0 && ms <= 1e6)) throw journal_error("slo_overhead " + std::to_string(ms) + " ms out of range");
      st.slo_request_overhead_ms = ms;
    } else if (type == "port") {
      auto port = j.at("port").get<int>();
      if (port < 0 || port > 65535) throw journal_error("port " + std::to_string(port) + " out of range");
      st.port = port;
    } else if (type == "data_key") {
      const auto& bytes = j.at("key").get_binary();
      if (bytes.size() != ucx_seal_key_bytes)
        throw journal_error("a data-plane key of " + std::to_string(bytes.size()) + " bytes, not " +
                            std::to_string(ucx_seal_key_bytes));
      st.data_key.assign(bytes.begin(), bytes.end());
    } else if (type == "next") {
      st.next_id = std::max(st.next_id, j.at("id").get<uint64_t>());
    } else {
      throw journal_error("unknown record type '" + type + "'");
    }
  } catch (const json::exception& e) {
    throw journal_error(std::string("malformed record (") + e.what() + ")");
  }
}

std::vector<std::string> checkpoint_records(const journal_state& st) {
  std::vector<std::string> out;
  out.push_back(to_cbor({{"t", "next"}, {"id", st.next_id}}));
  if (st.port > 0) out.push_back(encode_port(st.port));
  if (!st.policy.empty()) out.push_back(encode_policy(st.policy));
  if (st.slo_request_overhead_ms >= 0) out.push_back(encode_slo_overhead(st.slo_request_overhead_ms));
  if (!st.data_key.empty()) out.push_back(encode_data_key(st.data_key));
  for (const auto& [node, joins] : st.joins) out.push_back(encode_joined(node, joins));
  for (const auto& [node, sizes] : st.layouts) out.push_back(encode_layout(node, sizes));
  for (const auto& [key, a] : st.finished) out.push_back(encode_finished(a.request_id, key, a));
  for (const auto& [id, r] : st.live) out.push_back(encode_accepted(r));
  return out;
}

head_journal::head_journal(const std::string& dir, bool recover, std::size_t finished_kept,
                           std::uint64_t compact_min_bytes)
    : finished_kept_(finished_kept),
      compact_min_bytes_(compact_min_bytes),
      compact_at_(compact_min_bytes),
      wal_(prepare_log(dir, recover)) {
  auto records = std::move(wal_.recovered());
  std::size_t applied = 0;
  for (const auto& r : records) {
    try {
      apply_record(state_, r, finished_kept_);
      ++applied;
    } catch (const journal_error& e) {
      // Intact framing around a payload this version cannot read: keep what came before it.
      log_line("wal", "warning: " + wal_.path() + ": record " + std::to_string(applied + 1) + " of " +
                          std::to_string(records.size()) + ": " + e.what() + "; dropped it and every later record");
      break;
    }
  }
  if (applied < records.size()) wal_.rewrite(checkpoint_records(state_));
  recovered_ = state_;
  if (recover)
    log_line("wal", "recovered " + std::to_string(state_.live.size()) + " requests in flight, " +
                        std::to_string(state_.joins.size()) + " nodes, from " + std::to_string(applied) +
                        " records of " + wal_.path());
  syncer_ = std::thread([this] { run_syncs(); });
}

head_journal::~head_journal() {
  {
    std::lock_guard<std::mutex> q(queue_mu_);
    stopping_ = true;
  }
  queue_cv_.notify_one();
  syncer_.join();
}

void head_journal::append(const std::string& payload) {
  // On disk first: a write that fails leaves the state as the log has it.
  wal_.append(payload, false);
  apply_record(state_, payload, finished_kept_);
  note_growth();
}

void head_journal::append_synced(const std::string& payload) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    append(payload);
  }
  sync();  // outside mu_: appending actors never wait for the disk
}

void head_journal::append_applied(const std::string& payload, const std::function<void()>& apply) {
  wal_.append(payload, false);
  apply();
  note_growth();
}

void head_journal::note_growth() {
  if (wal_.size() <= compact_at_ || compact_due_) return;
  compact_due_ = true;
  // Through the queue's mutex, so that the thread cannot miss the flag between its check and its wait.
  {
    std::lock_guard<std::mutex> q(queue_mu_);
  }
  queue_cv_.notify_one();
}

void head_journal::sync_locked() {
  if (compact_due_.exchange(false)) {
    std::lock_guard<std::mutex> lk(mu_);
    try {
      wal_.rewrite(checkpoint_records(state_));
      ++compactions_;
    } catch (const std::exception& e) {
      // The records are still in the old log; the sync below makes them durable there.
      log_line("wal", std::string("warning: cannot checkpoint the log: ") + e.what());
    }
    compact_at_ = std::max(compact_min_bytes_, 2 * wal_.size());
  }
  wal_.sync();
}

void head_journal::sync() {
  std::lock_guard<std::mutex> s(sync_mu_);
  sync_locked();
}

void head_journal::sync_later(synced_fn done) {
  {
    std::lock_guard<std::mutex> q(queue_mu_);
    waiting_.push_back(std::move(done));
  }
  queue_cv_.notify_one();
}

void head_journal::run_syncs() {
  for (;;) {
    std::vector<synced_fn> batch;
    {
      std::unique_lock<std::mutex> q(queue_mu_);
      queue_cv_.wait(q, [&] { return stopping_ || !waiting_.empty() || compact_due_; });
      if (stopping_ && waiting_.empty()) return;
      batch.swap(waiting_);
    }
    std::string error;
    try {
      sync();
    } catch (const std::exception& e) {
      error = e.what();
    }
    for (auto& done : batch) done(error);
  }
}

void head_journal::accepted(const journal_request& r, bool sync_now) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (r.id == 0) throw journal_error("request id 0");
    append_applied(encode_accepted(r), [&] { apply_accepted(state_, r); });
  }
  if (sync_now) sync();
}

void head_journal::joined(const std::string& node, uint32_t joins) { append_synced(encode_joined(node, joins)); }

void head_journal::layout(const std::string& node, const std::vector<int32_t>& sizes) { append_synced(encode_layout(node, sizes)); }

void head_journal::policy(const std::string& name) { append_synced(encode_policy(name)); }

void head_journal::data_key(const std::string& key) { append_synced(encode_data_key(key)); }

void head_journal::port(int port) { append_synced(encode_port(port)); }

void head_journal::slo_overhead(double ms) { append_synced(encode_slo_overhead(ms)); }

void head_journal::snapshot(uint64_t id, const std::vector<char>& canvas, int32_t steps, int32_t tokens) {
  std::lock_guard<std::mutex> lk(mu_);
  if (!state_.live.count(id)) return;
  append_applied(encode_snapshot(id, canvas, steps, tokens), [&] { apply_snapshot(state_, id, canvas, steps, tokens); });
}

void head_journal::finished(uint64_t id, const answer& a) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = state_.live.find(id);
  if (it == state_.live.end()) return;
  auto key = it->second.key;
  append_applied(encode_finished(id, key, a),
                 [&] { apply_finished(state_, id, key, key.empty() ? answer{} : a, finished_kept_); });
}

std::optional<answer> head_journal::finished_answer(const std::string& key) const {
  std::lock_guard<std::mutex> lk(mu_);
  for (auto it = state_.finished.rbegin(); it != state_.finished.rend(); ++it)
    if (it->first == key) return it->second;
  return std::nullopt;
}

journal_state head_journal::state() const {
  std::lock_guard<std::mutex> lk(mu_);
  return state_;
}

std::uint64_t head_journal::bytes() const {
  std::lock_guard<std::mutex> lk(mu_);
  return wal_.size();
}

std::size_t head_journal::compactions() const {
  std::lock_guard<std::mutex> lk(mu_);
  return compactions_;
}

}  // namespace dls::runtime
