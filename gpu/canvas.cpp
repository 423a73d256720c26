#include "gpu/canvas.hpp"

#include "gpu/dream_schedule.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace dls::gpu {

namespace {
// A bound on a canvas's step counts: 2^62 steps at a nanosecond each would take 146 years, and
// below it the next step's increment cannot overflow int64.
constexpr int64_t max_step_count = int64_t{1} << 62;
}  // namespace

canvas canvas::start(const std::vector<int32_t>& prompt, const decode_params& params, int32_t mask_id,
                     int32_t eos_id) {
  if (auto why = params.validate(); !why.empty()) throw std::invalid_argument(why);
  if (prompt.empty()) throw std::invalid_argument("the prompt is empty");
  canvas c;
  c.ids = prompt;
  c.ids.resize(prompt.size() + static_cast<std::size_t>(params.gen_length), mask_id);
  c.prompt_len = static_cast<int32_t>(prompt.size());
  c.mask_id = mask_id;
  c.eos_id = eos_id;
  c.params = params;
  c.block_masks = c.block_end() - c.block_begin();
  return c;
}

int canvas::num_blocks() const {
  // In 64 bits: a block length near INT_MAX must not wrap the rounding up.
  return static_cast<int>((int64_t{params.gen_length} + params.block_length - 1) / params.block_length);
}

int canvas::block_begin() const { return prompt_len + block * params.block_length; }

int canvas::block_end() const {
  return static_cast<int>(std::min<int64_t>(int64_t{block_begin()} + params.block_length, length()));
}

bool canvas::at_refresh_boundary() const {
  if (params.cache == cache_mode::none || step_in_block == 0) return true;
  return params.refresh_interval > 0 && step_in_block % params.refresh_interval == 0;
}

step_plan canvas::next_step(int logit_shift) const {
  step_plan p;
  p.block0 = block_begin();
  p.block1 = block_end();
  p.key_rows = length();
  if (at_refresh_boundary()) {
    p.kind = step_kind::refresh;
    p.q0 = 0;
    p.q1 = length();
  } else {
    p.kind = step_kind::reuse;
    p.q0 = std::max(0, p.block0 - logit_shift);
    p.q1 = params.cache == cache_mode::dual ? p.block1 : length();
  }
  return p;
}

int canvas::apply(const std::vector<row_proposal>& proposals) {
  if (finished) return 0;
  const int b0 = block_begin(), b1 = block_end();
  std::vector<row_proposal> masked;
  for (const auto& pr : proposals)
    if (pr.position >= b0 && pr.position < b1 && ids[static_cast<std::size_t>(pr.position)] == mask_id)
      masked.push_back(pr);
  if (masked.empty()) throw std::logic_error("canvas::apply: no proposal for a masked row of the current block");
  const int spb = params.block_steps();
  const auto counter = static_cast<uint64_t>(steps);
  std::vector<int32_t> chosen;
  if (params.rule == commit_rule::origin) {
    chosen = origin_commits(masked, dream_transfer_probability(spb, step_in_block, params.eps), params.seed, counter);
  } else if (params.counted() && params.schedule == step_schedule::dream_linear) {
    // Dream counts the masks still left; its last step takes them all, so a block ends within spb steps.
    const int left = static_cast<int>(std::count(ids.begin() + b0, ids.begin() + b1, mask_id));
    const int n = dream_transfer_count(left, spb, step_in_block, params.eps);
    if (n > 0)
      chosen = params.alg_temp > 0 ? sample_commits(masked, n, params.alg_temp, params.seed, counter)
                                   : select_commits(masked, params.rule, params.threshold, n, params.factor);
  } else {
    const int quota = quota_for_step(block_masks, spb, step_in_block);
    chosen = params.alg_temp > 0 ? sample_commits(masked, quota, params.alg_temp, params.seed, counter)
                                 : select_commits(masked, params.rule, params.threshold, quota, params.factor);
  }
  for (auto pos : chosen) {
    auto it = std::find_if(masked.begin(), masked.end(), [&](const row_proposal& r) { return r.position == pos; });
    ids[static_cast<std::size_t>(pos)] = it->token;
  }
  const bool was_refresh = at_refresh_boundary();
  ++steps;
  ++(was_refresh ? refresh_steps : reuse_steps);
  ++step_in_block;
  committed += static_cast<int64_t>(chosen.size());
  bool block_done = std::none_of(ids.begin() + b0, ids.begin() + b1, [&](int32_t t) { return t == mask_id; });
  if (block_done) {
    bool has_eos = std::any_of(ids.begin() + prompt_len, ids.begin() + b1, [&](int32_t t) { return t == eos_id; });
    if (has_eos || block + 1 >= num_blocks()) {
      finished = true;
    } else {
      ++block;
      step_in_block = 0;
      block_masks = block_end() - block_begin();
    }
  }
  return static_cast<int>(chosen.size());
}

std::vector<int32_t> canvas::answer() const {
  std::vector<int32_t> out;
  for (std::size_t i = static_cast<std::size_t>(prompt_len); i < ids.size(); ++i) {
    if (ids[i] == eos_id || ids[i] == mask_id) break;
    out.push_back(ids[i]);
  }
  return out;
}

// -- serialization: "DLSC" v4, little-endian fixed-width fields, then the ids --------------
// v2 added top_p, top_k and alg_temp after the seed, v3 the schedule after them, v4 eps after it;
// older canvases (journals of older heads, requests from nodes not yet upgraded) still load, with
// those off or at Dream's default eps.

namespace {

constexpr char magic[4] = {'D', 'L', 'S', 'C'};
constexpr uint32_t version = 4;

template <class T>
void put(std::string& out, T v) {
  char buf[sizeof(T)];
  std::memcpy(buf, &v, sizeof(T));
  out.append(buf, sizeof(T));
}

struct reader {
  const std::string& s;
  std::size_t pos = 0;
  template <class T>
  T get(const char* what) {
    if (pos + sizeof(T) > s.size())
      throw std::invalid_argument(std::string("canvas bytes truncated at byte ") + std::to_string(pos) + " (" + what +
                                  ")");
    T v;
    std::memcpy(&v, s.data() + pos, sizeof(T));
    pos += sizeof(T);
    return v;
  }
};

}  // namespace

std::string canvas::to_bytes() const {
  std::string out(magic, 4);
  put(out, version);
  put(out, prompt_len);
  put(out, mask_id);
  put(out, eos_id);
  put(out, static_cast<int32_t>(params.gen_length));
  put(out, static_cast<int32_t>(params.block_length));
  put(out, static_cast<uint8_t>(params.rule));
  put(out, params.threshold);
  put(out, static_cast<int32_t>(params.steps_per_block));
  put(out, params.factor);
  put(out, static_cast<uint8_t>(params.cache));
  put(out, static_cast<int32_t>(params.refresh_interval));
  put(out, params.temperature);
  put(out, params.seed);
  put(out, params.top_p);
  put(out, static_cast<int32_t>(params.top_k));
  put(out, params.alg_temp);
  put(out, static_cast<uint8_t>(params.schedule));
  put(out, params.eps);
  put(out, block);
  put(out, step_in_block);
  put(out, block_masks);
  put(out, steps);
  put(out, refresh_steps);
  put(out, reuse_steps);
  put(out, committed);
  put(out, static_cast<uint8_t>(finished));
  put(out, static_cast<uint32_t>(ids.size()));
  out.append(reinterpret_cast<const char*>(ids.data()), ids.size() * sizeof(int32_t));
  return out;
}

canvas canvas::from_bytes(const std::string& bytes) {
  if (bytes.size() < 8 || std::memcmp(bytes.data(), magic, 4) != 0)
    throw std::invalid_argument("not a canvas: bad magic at byte 0");
  reader r{bytes, 4};
  const auto v = r.get<uint32_t>("version");
  if (v < 1 || v > version) throw std::invalid_argument("canvas version " + std::to_string(v) + " is not supported");
  canvas c;
  c.prompt_len = r.get<int32_t>("prompt_len");
  c.mask_id = r.get<int32_t>("mask_id");
  c.eos_id = r.get<int32_t>("eos_id");
  c.params.gen_length = r.get<int32_t>("gen_length");
  c.params.block_length = r.get<int32_t>("block_length");
  auto rule = r.get<uint8_t>("rule");
  if (rule > static_cast<uint8_t>(commit_rule::origin))
    throw std::invalid_argument("canvas has an unknown commit rule " + std::to_string(rule));
  c.params.rule = static_cast<commit_rule>(rule);
  c.params.threshold = r.get<double>("threshold");
  c.params.steps_per_block = r.get<int32_t>("steps_per_block");
  c.params.factor = r.get<double>("factor");
  auto cm = r.get<uint8_t>("cache");
  if (cm > 2) throw std::invalid_argument("canvas has an unknown cache mode " + std::to_string(cm));
  c.params.cache = static_cast<cache_mode>(cm);
  c.params.refresh_interval = r.get<int32_t>("refresh_interval");
  c.params.temperature = r.get<double>("temperature");
  c.params.seed = r.get<uint64_t>("seed");
  if (v >= 2) {
    c.params.top_p = r.get<double>("top_p");
    c.params.top_k = r.get<int32_t>("top_k");
    c.params.alg_temp = r.get<double>("alg_temp");
  }
  if (v >= 3) {
    auto sched = r.get<uint8_t>("schedule");
    if (sched > static_cast<uint8_t>(step_schedule::dream_linear))
      throw std::invalid_argument("canvas has an unknown schedule " + std::to_string(sched));
    c.params.schedule = static_cast<step_schedule>(sched);
  }
  if (v >= 4) c.params.eps = r.get<double>("eps");
  c.block = r.get<int32_t>("block");
  c.step_in_block = r.get<int32_t>("step_in_block");
  c.block_masks = r.get<int32_t>("block_masks");
  c.steps = r.get<int64_t>("steps");
  c.refresh_steps = r.get<int64_t>("refresh_steps");
  c.reuse_steps = r.get<int64_t>("reuse_steps");
  c.committed = r.get<int64_t>("committed");
  c.finished = r.get<uint8_t>("finished") != 0;
  auto n = r.get<uint32_t>("ids length");
  if (r.pos + std::size_t{n} * 4 != bytes.size())
    throw std::invalid_argument("canvas bytes: " + std::to_string(n) + " ids do not fit the " +
                                std::to_string(bytes.size()) + "-byte buffer");
  c.ids.resize(n);
  if (n > 0) std::memcpy(c.ids.data(), bytes.data() + r.pos, std::size_t{n} * 4);  // data() may be null when empty
  if (auto why = c.params.validate(); !why.empty()) throw std::invalid_argument("canvas bytes: " + why);
  if (c.prompt_len <= 0 || int64_t{c.prompt_len} + c.params.gen_length != int64_t{n} || c.block < 0 ||
      c.block >= c.num_blocks())
    throw std::invalid_argument("canvas bytes: inconsistent lengths or block index");
  // A block ends within max(block_length, block_steps) steps: threshold and factor commit at
  // least one token a step, the counted rules and origin end it after block_steps. So a saved
  // canvas is below that bound (at it only once finished, which takes no further step), and the
  // next ++step_in_block cannot overflow.
  const int most = std::max(c.params.block_length, c.params.block_steps());
  if (c.step_in_block < 0 || c.step_in_block > most || (c.step_in_block == most && !c.finished))
    throw std::invalid_argument("canvas bytes: step " + std::to_string(c.step_in_block) +
                                " of a block is past the most a block of " + std::to_string(c.params.block_length) +
                                " tokens takes");
  // Every step adds one to steps and to one of refresh_steps and reuse_steps, and commits at
  // most the answer's length in all; other counts are no decode's, and the next step's
  // increment would overflow them.
  if (c.refresh_steps < 0 || c.reuse_steps < 0 || c.refresh_steps > max_step_count - c.reuse_steps ||
      c.steps != c.refresh_steps + c.reuse_steps || c.committed < 0 || c.committed > c.params.gen_length)
    throw std::invalid_argument("canvas bytes: impossible step counts (steps " + std::to_string(c.steps) +
                                ", refresh " + std::to_string(c.refresh_steps) + ", reuse " +
                                std::to_string(c.reuse_steps) + ", committed " + std::to_string(c.committed) + ")");
  return c;
}

}  // namespace dls::gpu
