#pragma once
// Step-cost model: the latency of one batched denoising step on a TP group of degree k.
// Two forms share one interface because every form is a function of the same batch sums:
//  - roofline: max(FLOPs / (k F eff), bytes / (k BW eff)) + per-layer all-reduces + overhead,
//    for analytic profiles (LLaDA-8B on H100/H200 in configs/sim/profiles/);
//  - linear: c0 + c_req n + c_q sum(q) + c_k sum(k) + c_qk sum(q k) per TP degree, fitted
//    by non-negative least squares from measured samples (`dilaserve profile`, GPU checks).
// File format: docs/policies.md, "Step-cost profiles".
#include "policies/snapshot.hpp"

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace dls::policy {

/// One request's share of a step: query rows computed, key rows attended, logit rows, and the
/// range of the model's layers it runs them through, [layer_begin, layer_begin + layer_share)
/// as fractions of the layers. A layer-split refresh runs a range of layers per step (its rows'
/// hidden states wait between steps), and only the chunk that reaches the last layer has logit
/// rows.
struct step_item {
  step_kind kind = step_kind::reuse;
  int query_rows = 0;
  int key_rows = 0;
  int logit_rows = 0;
  double layer_share = 1.0;
  double layer_begin = 0.0;
  bool operator==(const step_item& o) const {
    return kind == o.kind && query_rows == o.query_rows && key_rows == o.key_rows &&
           logit_rows == o.logit_rows && layer_share == o.layer_share && layer_begin == o.layer_begin;
  }
};

/// The shape of the step a request takes next (dual cache): refresh q = k = P + G,
/// reuse q = B, k = P + G; logits only for the B block rows.
step_item next_step_item(const request_view& r);
step_item step_item_of(step_kind kind, int canvas_len, int block_len);
/// `share` of a refresh's layers from `begin` on; `completes`: this chunk reaches the last
/// layer (logits).
step_item refresh_chunk(int canvas_len, int block_len, double share, bool completes, double begin = 0.0);
/// Whether running `share` of its layers this step finishes the request's step: every step
/// but a split refresh's ranges that stop short of the last layer.
bool completes_step(const request_view& r, double share);
/// The item for running `share` of the request's next step (next_step_item when it completes).
step_item step_item_for(const request_view& r, double share);

/// Sums over a batch, so a batch costs O(batch) once. Rows are weighted by each item's layer
/// share. The items that run only some layers are also kept whole in `parts` (a few per step):
/// the roofline costs a step layer by layer, and a range shares a layer's weight read only
/// with the items that run that layer.
struct batch_totals {
  double requests = 0, query_rows = 0, key_rows = 0, qk = 0, logit_rows = 0;
  /// Refresh items (whole or ranges); an expected batch holds a fraction, and a step pays the
  /// linear form's per-refresh-step cost min(1, refresh_items) times.
  double refresh_items = 0;
  std::vector<step_item> parts;  // items with layer_share < 1
  /// Fraction of the layers (weights, all-reduces) the step runs: all of them when some item
  /// runs every layer, else the union of the parts' ranges.
  double layer_fraction() const;
  void add(const step_item& it);
  void remove(const step_item& it);
};

/// Analytic roofline constants; every value's source is stated in the profile file.
struct roofline_params {
  double peak_flops = 0;            // dense bf16 FLOP/s per device
  double flops_efficiency = 1;      // achieved fraction of peak
  double hbm_bytes_per_s = 0;       // per device
  double bandwidth_efficiency = 1;
  double weight_bytes = 0;          // read once per step (split over k devices)
  double kv_bytes_per_token = 0;    // K and V, all layers
  double nonembed_params = 0;       // 2 FLOPs per param per query row
  double head_params = 0;           // 2 FLOPs per param per logit row
  double layers = 0;
  double d_model = 0;
  double activation_bytes = 2;      // bytes per element all-reduced (bf16)
  double allreduce_latency_s = 0;   // per all-reduce, two per layer when k > 1
  double link_bytes_per_s = 0;      // per-direction NVLink bandwidth per device
  double step_overhead_s = 0;       // launch and sampling overhead per step
};

/// Per-TP-degree coefficients of the linear model (seconds per unit).
struct linear_coeffs {
  double fixed_s = 0, per_request_s = 0, per_query_row_s = 0, per_key_row_s = 0, per_qk_s = 0;
  /// Paid once by a step that holds a refresh (or a range of one), whatever its size: on the
  /// CPU engine a refresh batch costs about 0.23 ms more than its rows explain, a reuse batch
  /// nothing (docs/policies.md, "Step-cost model").
  double per_refresh_step_s = 0;
};

/// One measured step: `batch` identical requests of the given kind and row counts, or, with
/// `refreshing` >= 0, a mixed batch as a loaded group runs it: that many requests refresh
/// (query rows = key_rows) and the others reuse with `query_rows`.
struct profile_sample {
  int tp = 1;
  step_kind kind = step_kind::reuse;
  int batch = 1;
  int query_rows = 0;   // per request (per reusing request in a mixed batch)
  int key_rows = 0;     // per request
  double seconds = 0;
  int refreshing = -1;  // -1: every request is of `kind`
};

/// The linear form's features of a sample: [1, requests, query rows, key rows, query x key
/// rows, holds a refresh], summed over its requests.
std::array<double, 6> profile_features(const profile_sample& s);

struct fit_report {
  int tp = 1;
  std::size_t samples = 0;
  double r2 = 0;                  // coefficient of determination on the samples
  double max_rel_error = 0;       // worst |pred - t| / t
};

/// Fits `linear_coeffs` per TP degree by non-negative least squares on the features
/// (profile_features). Throws std::invalid_argument when a degree has < 2 samples.
std::map<int, linear_coeffs> fit_linear_step_cost(const std::vector<profile_sample>& samples,
                                                  std::vector<fit_report>* report = nullptr);

/// Solves min |A x - y| subject to x >= 0 (Lawson-Hanson active set); A is row-major m x n.
std::vector<double> nnls(const std::vector<double>& a, const std::vector<double>& y, int m, int n);

/// Device memory facts used for KV admission (tokens of canvas a group can hold).
struct memory_params {
  double device_bytes = 0;
  double weight_bytes = 0;        // every device keeps full weights (no movement on regroup)
  double reserve_bytes = 0;       // activations, workspace
  double kv_bytes_per_token = 0;
};

/// A whole step's roofline pieces on a TP-k group: compute seconds (FLOPs at the group's
/// rate), memory seconds (weights and KV at its bandwidth) and the fixed seconds (all-reduces
/// and per-step overhead); the step takes max(compute, memory) + fixed.
struct step_parts {
  double compute_s = 0;
  double memory_s = 0;
  double fixed_s = 0;
};

/// A measured data-plane link between two processes (`dilaserve bench-migration --profile`,
/// one per UCX transport): moving b bytes takes latency_s + b / bytes_per_s.
struct transfer_link {
  std::string tls;  // the UCX_TLS value it was measured with
  double bytes_per_s = 0;
  double latency_s = 0;
};

class step_cost_model {
 public:
  enum class form { roofline, linear };

  static step_cost_model make_roofline(const roofline_params& p, std::vector<int> tp_degrees);
  static step_cost_model make_linear(std::map<int, linear_coeffs> coeffs);

  /// Seconds for one step of a batch with these totals on a TP-k group.
  double step_seconds(int tp, const batch_totals& t) const;
  double step_seconds(int tp, const std::vector<step_item>& items) const;
  /// Roofline profiles only (std::logic_error otherwise), batches without layer ranges.
  step_parts roofline_parts(int tp, const batch_totals& t) const;
  bool supports(int tp) const;
  const std::vector<int>& tp_degrees() const { return tps_; }
  form kind() const { return form_; }
  const roofline_params& roofline() const { return roof_; }
  const std::map<int, linear_coeffs>& linear() const { return lin_; }

  /// Canvas tokens whose KV fits on a TP-k group (KV is split across the k devices).
  double kv_capacity_tokens(int tp) const;

  std::string hardware;
  std::string model;
  std::string source;
  memory_params memory;
  std::vector<transfer_link> transfer;  // measured links, if the profile has a `transfer` list

 private:
  form form_ = form::roofline;
  roofline_params roof_{};
  std::map<int, linear_coeffs> lin_;
  std::vector<int> tps_;
  std::array<linear_coeffs, 65> lin_fast_{};  // indexed by tp, avoids a map lookup per step
  /// Body time of a step with layer ranges, and (out) the fraction of the layers it runs.
  double layered_body_s(const batch_totals& t, double flop_rate, double byte_rate, double head_flops,
                        double& layers_run) const;
  /// All-reduces over `layers` (a fraction of the model's) plus the per-step overhead.
  double fixed_seconds(int tp, double query_rows, double layers) const;
};

/// The same model with `extra_s` more fixed seconds per step on TP-`tp` groups: a measured
/// per-step overhead the profile does not hold (the runtime's messaging around each engine
/// step). Roofline profiles add it to the step overhead of every degree.
step_cost_model with_step_overhead(const step_cost_model& m, int tp, double extra_s);

/// Loads a profile (YAML or JSON; yaml-cpp reads both). Relative paths are the caller's.
/// Kinds: "roofline" (analytic), "linear" (coefficients), "measured" (samples, fitted here).
step_cost_model load_step_cost_profile(const std::string& path);
/// Same, from the text of a profile.
step_cost_model parse_step_cost_profile(const std::string& text);

}  // namespace dls::policy
