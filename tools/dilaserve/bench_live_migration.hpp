#pragma once
// bench-migration's live figures: migrations through the real path (a cluster of two node
// processes started with `up`, orders through the head, the groups' own measurement of each
// move from "stop" at the source to the end of the first step at the destination).
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace dls::cli {

struct live_migration_options {
  std::string tls;             // ucx.tls of the cluster
  bool encrypt = true;         // ucx.encrypt of the cluster
  std::string model;           // the shipped model (canvas moves; tokenizer of the big model)
  std::vector<int> lengths;    // canvas lengths of the mid-block moves on the d_model 512 model
  int canvas_moves = 20;       // boundary moves of the shipped model
  int midblock_moves = 3;      // per length and way (transfer, rebuild)
  std::string work_dir;        // clusters' state directories and the big model
};

/// {"canvas_move_ms": {p50, p99, n}, "midblock": [{L, kv, transfer_ms: {p50, p99, n}, recompute_ms: {...}}]}
nlohmann::json live_migration(const live_migration_options& o);

}  // namespace dls::cli
