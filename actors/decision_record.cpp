#include "actors/decision_record.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace dls::actors {

namespace {

using nlohmann::json;

json request_json(const policy::request_view& r) {
  return {{"id", r.id},
          {"arrival_s", r.arrival_s},
          {"deadline_s", r.deadline_s},
          {"tau", r.tau},
          {"tau_low", r.tau_low},
          {"tau_pinned", r.tau_pinned},
          {"tau_floor", r.tau_floor},
          {"reject_on_miss", r.reject_on_miss},
          {"prompt_len", r.prompt_len},
          {"gen_len", r.gen_len},
          {"block_len", r.block_len},
          {"blocks_done", r.blocks_done},
          {"steps_in_block", r.steps_in_block},
          {"masks_left_in_block", r.masks_left_in_block},
          {"next_refresh", r.next_kind == policy::step_kind::refresh},
          {"refresh_done", r.refresh_done},
          {"group", r.group}};
}

// Field readers that name what is wrong; `where` is the path of the enclosing object.
const json& field(const json& j, const char* key, const std::string& where) {
  if (!j.is_object()) throw std::invalid_argument(where + " is not an object");
  auto it = j.find(key);
  if (it == j.end()) throw std::invalid_argument(where + "." + key + " is missing");
  return *it;
}

double number(const json& j, const char* key, const std::string& where) {
  const auto& v = field(j, key, where);
  if (!v.is_number() || !std::isfinite(v.get<double>()))
    throw std::invalid_argument(where + "." + key + " is not a finite number");
  return v.get<double>();
}

int integer(const json& j, const char* key, const std::string& where, int lo, int hi) {
  const auto& v = field(j, key, where);
  if (!v.is_number_integer() || v.get<long long>() < lo || v.get<long long>() > hi)
    throw std::invalid_argument(where + "." + key + " is not an integer in [" + std::to_string(lo) + ", " +
                                std::to_string(hi) + "]");
  return static_cast<int>(v.get<long long>());
}

std::uint64_t id_of(const json& v, const std::string& where) {
  if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<long long>() >= 0))
    throw std::invalid_argument(where + " is not a request id");
  return v.get<std::uint64_t>();
}

bool flag(const json& j, const char* key, const std::string& where) {
  const auto& v = field(j, key, where);
  if (!v.is_boolean()) throw std::invalid_argument(where + "." + key + " is not true or false");
  return v.get<bool>();
}

const json& list(const json& j, const char* key, const std::string& where) {
  const auto& v = field(j, key, where);
  if (!v.is_array()) throw std::invalid_argument(where + "." + key + " is not a list");
  return v;
}

constexpr int max_tokens = 1 << 24;  // far beyond any canvas: a larger count is a corrupt record

policy::request_view request_from(const json& j, const std::string& where) {
  policy::request_view r;
  r.id = id_of(field(j, "id", where), where + ".id");
  r.arrival_s = number(j, "arrival_s", where);
  r.deadline_s = number(j, "deadline_s", where);
  r.tau = number(j, "tau", where);
  r.tau_low = number(j, "tau_low", where);
  r.tau_pinned = flag(j, "tau_pinned", where);
  r.tau_floor = number(j, "tau_floor", where);
  r.reject_on_miss = flag(j, "reject_on_miss", where);
  r.prompt_len = integer(j, "prompt_len", where, 0, max_tokens);
  r.gen_len = integer(j, "gen_len", where, 0, max_tokens);
  r.block_len = integer(j, "block_len", where, 1, max_tokens);
  r.blocks_done = integer(j, "blocks_done", where, 0, max_tokens);
  r.steps_in_block = integer(j, "steps_in_block", where, 0, max_tokens);
  r.masks_left_in_block = integer(j, "masks_left_in_block", where, 0, max_tokens);
  r.next_kind = flag(j, "next_refresh", where) ? policy::step_kind::refresh : policy::step_kind::reuse;
  r.refresh_done = number(j, "refresh_done", where);
  r.group = integer(j, "group", where, -1, 1 << 30);
  return r;
}

std::vector<policy::request_view> requests_from(const json& j, const char* key) {
  std::vector<policy::request_view> out;
  const auto& l = list(j, key, "snapshot");
  out.reserve(l.size());
  for (std::size_t i = 0; i < l.size(); ++i)
    out.push_back(request_from(l[i], std::string("snapshot.") + key + "[" + std::to_string(i) + "]"));
  return out;
}

}  // namespace

std::string to_json_line(const decision_record& r) {
  const auto& s = r.snapshot;
  json active = json::array(), queued = json::array(), arrivals = json::array();
  for (const auto& q : s.active) active.push_back(request_json(q));
  for (const auto& q : s.queued) queued.push_back(request_json(q));
  for (const auto& a : r.arrivals)
    arrivals.push_back({{"t_s", a.t_s}, {"prompt_len", a.prompt_len}, {"gen_len", a.gen_len}, {"window_s", a.window_s}});
  json j{{"group", r.group},
         {"policy", r.policy},
         {"step_overhead_s", r.step_overhead_s},
         {"snapshot",
          {{"now_s", s.now_s},
           {"group", {{"id", s.group.id}, {"node", s.group.node}, {"tp", s.group.tp}, {"draining", s.group.draining}}},
           {"active", std::move(active)},
           {"queued", std::move(queued)},
           {"kv_free_tokens", std::min(s.kv_free_tokens, 1e300)},
           {"tau_cap", s.tau_cap},
           {"control_due", s.control_due},
           {"fresh", s.fresh},
           {"unlisted_queued", s.unlisted_queued}}},
         {"ledger",
          {{"budget", r.ledger.budget},
           {"tau_ref", r.ledger.tau_ref},
           {"earned", r.ledger.earned},
           {"spent", r.ledger.spent},
           {"reserved", r.ledger.reserved},
           {"finished", r.ledger.finished}}},
         {"arrivals", std::move(arrivals)}};
  return j.dump();
}

decision_record decision_record_from_json(const std::string& line) {
  json j;
  try {
    j = json::parse(line);
  } catch (const json::parse_error& e) {
    throw std::invalid_argument(std::string("not JSON: ") + e.what());
  }
  decision_record r;
  const auto& name = field(j, "group", "record");
  const auto& pol = field(j, "policy", "record");
  if (!name.is_string() || !pol.is_string()) throw std::invalid_argument("record.group and record.policy must be text");
  r.group = name.get<std::string>();
  r.policy = pol.get<std::string>();
  r.step_overhead_s = number(j, "step_overhead_s", "record");
  const auto& s = field(j, "snapshot", "record");
  auto& g = r.snapshot;
  g.now_s = number(s, "now_s", "snapshot");
  const auto& gv = field(s, "group", "snapshot");
  g.group.id = integer(gv, "id", "snapshot.group", 0, 1 << 30);
  g.group.node = integer(gv, "node", "snapshot.group", 0, 1 << 30);
  g.group.tp = integer(gv, "tp", "snapshot.group", 1, 1 << 16);
  g.group.draining = flag(gv, "draining", "snapshot.group");
  g.active = requests_from(s, "active");
  g.queued = requests_from(s, "queued");
  g.kv_free_tokens = number(s, "kv_free_tokens", "snapshot");
  g.tau_cap = number(s, "tau_cap", "snapshot");
  g.control_due = flag(s, "control_due", "snapshot");
  const auto& fresh = list(s, "fresh", "snapshot");
  for (std::size_t i = 0; i < fresh.size(); ++i) g.fresh.push_back(id_of(fresh[i], "snapshot.fresh[" + std::to_string(i) + "]"));
  g.unlisted_queued = static_cast<std::size_t>(integer(s, "unlisted_queued", "snapshot", 0, 1 << 30));
  const auto& l = field(j, "ledger", "record");
  r.ledger.budget = number(l, "budget", "ledger");
  r.ledger.tau_ref = number(l, "tau_ref", "ledger");
  r.ledger.earned = number(l, "earned", "ledger");
  r.ledger.spent = number(l, "spent", "ledger");
  r.ledger.reserved = number(l, "reserved", "ledger");
  r.ledger.finished = number(l, "finished", "ledger");
  const auto& arr = list(j, "arrivals", "record");
  r.arrivals.reserve(arr.size());
  for (std::size_t i = 0; i < arr.size(); ++i) {
    const std::string where = "arrivals[" + std::to_string(i) + "]";
    r.arrivals.push_back({number(arr[i], "t_s", where), integer(arr[i], "prompt_len", where, 0, max_tokens),
                          integer(arr[i], "gen_len", where, 0, max_tokens), number(arr[i], "window_s", where)});
  }
  return r;
}

decision_log::decision_log(const std::string& dir, const std::string& group, int every)
    : every_(std::max(1, every)) {
  auto file = group;
  std::replace(file.begin(), file.end(), '/', '_');
  const auto path = dir + "/" + file + ".jsonl";
  out_.open(path, std::ios::app);
  if (!out_) throw std::runtime_error("cannot open " + path + " for the decision log");
}

void decision_log::append(const decision_record& r) {
  out_ << to_json_line(r) << '\n';
  out_.flush();
}

}  // namespace dls::actors
