#pragma once
// The cluster as described by one YAML file (schema: docs/config.md).
// Parsing validates everything up front so that a bad file fails with one line that
// names the file, line, column and problem, instead of failing later inside a process.
#include "config/cluster_schema.hpp"
#include "runtime/request_limits.hpp"

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace dls::runtime {

using config::config_error;
using config::device_spec;
using config::engine_defaults;
using config::node_config;
using config::migration_settings;
using config::reconfigure_settings;
using config::scheduler_settings;

/// How many finished requests the head's actor directory keeps as full rows; older ones
/// leave it and only their counts remain (in `status`).
struct directory_retention {
  // About 2.5 KB of head memory per row: 1000 rows bound the directory near 2.5 MB while
  // keeping far more than a screen of recent requests to inspect.
  int64_t finished_requests = 1000;
  int64_t finished_age_s = 3600;  // 0: no age bound, only the count
};

/// The OpenAI-compatible HTTP gateway in the head process (docs/http.md). Off unless
/// the file has an `http` section.
struct http_config {
  bool enabled = false;
  std::string host = "127.0.0.1";
  uint16_t port = 0;  // 0: a free port, recorded in the state directory
  std::string api_keys_file;  // absolute
  std::vector<std::string> api_keys;  // read from api_keys_file at load time
  // 1 MiB: far above any prompt the shipped models accept, small enough that a
  // flood of huge bodies cannot exhaust the head's memory.
  std::size_t max_body_bytes = 1 << 20;
  int max_concurrent = 256;  // requests in flight through the gateway before 429
  bool metrics_public = false;  // /metrics without a key (for a scraper on a trusted network)
  int request_timeout_s = 300;  // the longest the gateway waits for one answer
};

/// The UCX data plane between node processes (docs/config.md, "ucx"): KV caches and other
/// large buffers travel over it, control stays on CAF.
struct ucx_config {
  std::string tls = "tcp";           // UCX_TLS: the transports UCX may use, e.g. "tcp" or "shm,cma,tcp"
  std::string net_devices = "all";   // UCX_NET_DEVICES: "lo" keeps tcp on the loopback device
  // Buffers up to this size go eagerly (copied through UCX's bounce buffers and once more into
  // the receive buffer); larger ones by rendezvous into registered memory. 1 MiB: side by side
  // on both transports, eager moved 1 MiB buffers 1.3x (tcp) and 1.7x (shared memory) faster
  // than rendezvous, whose handshake is a fixed cost per buffer, while at 2 MiB the two were
  // level (docs/performance.md, "Eager up to 1 MiB").
  std::size_t rndv_threshold_bytes = 1 << 20;
  // Larger buffers travel in parts of this size, each hashed (XXH3) just before it is sent and
  // checked as soon as it lands, on a thread beside UCX's progress thread, so that hashing
  // overlaps the transfer instead of adding to it. 0 sends every buffer whole. 2 MiB: of 512 KiB,
  // 2 MiB and 4 MiB it was the best on both transports here (docs/performance.md, "Data plane
  // in parts"); smaller parts cost a rendezvous and two thread hops each for little hashing.
  std::size_t part_bytes = 2 << 20;
  // UCX's tcp segment (UCX_TCP_TX_SEG_SIZE and UCX_TCP_RX_SEG_SIZE): with peer-failure handling,
  // which our tcp endpoints ask for, UCX 1.13 moves rendezvous data over tcp in segments of this
  // size rather than in one zero-copy send, so its default of 8/64 KiB costs a system call and a
  // wakeup per 64 KiB. 512 KiB: against the default, 1.3-2x the bandwidth over tcp at 1-64 MiB;
  // 1 and 2 MiB were level with it from 4 MiB up and slower at 1 MiB (docs/performance.md, "The
  // tcp segment"). Each endpoint holds a few segments, so memory stays within a few MiB a peer.
  // 0 keeps UCX's own sizes.
  std::size_t tcp_segment_bytes = 512 << 10;
  // The deadline of one transfer: 10 s moves 256 MB at 25 MB/s, far below any transport here.
  int timeout_ms = 10000;
  // A mid-block migration to another process: "auto" moves the KV cache when the profile's
  // measured link (bench-migration, or `up`) predicts it beats one refresh at the destination
  // (policy::compare_kv_move), else rebuilds it; "transfer" and "rebuild" force one way.
  std::string kv_move = "auto";
  // Where a request's recovery snapshot (its canvas at the last refresh boundary) is kept:
  // "head" (the request's actor, and its write-ahead log) or "peer" (sent over UCX to another
  // node, the head only learning where; runtime/peer_snapshot.hpp).
  std::string snapshots = "head";
  // Every part between processes sealed with AES-256-GCM under the cluster's data-plane key
  // (runtime/ucx_seal.hpp): nobody on the path between node hosts reads or replaces a KV cache
  // or a canvas. false: XXH3 checksums only, for a network every host on it is trusted with the
  // data (docs/runtime.md, "Security"); what it saves is in docs/performance.md ("Sealing").
  bool encrypt = true;
};

struct cluster_config {
  std::string file;  // where it was loaded from (for messages)
  std::string name;
  std::string token;  // the admin credential, from `auth.token` or `auth.token_file`
  std::string token_file;
  std::string submit_token;  // submit-only credential (empty: none issued)
  std::string node_token;    // may only join as a node (empty: nodes join with the admin token)
  std::string tls_dir;       // the cluster's CA and certificates; empty: STATE_DIR/tls, made by `up`
  bool insecure = false;     // plain TCP: anyone who reaches the head port can try every actor id
  std::string head_host = "127.0.0.1";
  uint16_t head_port = 0;
  // `up` runs the head under its watchdog with the write-ahead log in the state directory;
  // false: no log and no restart (a head crash loses the requests in flight).
  bool head_wal = true;
  int heartbeat_interval_ms = 500;
  int dead_after_ms = 3000;
  // How long nodes and clients wait for a lost head to come back (restarted by `up`'s watchdog
  // or `start --head --recover`) before they give up; 0: they give up at once. The default
  // covers a watchdog restart (about a second on a loaded 2-core machine, docs/reliability.md)
  // many times over, and an operator's scripted `start --recover`.
  int head_grace_ms = 30000;
  std::vector<node_config> nodes;
  std::string model_path;  // absolute
  engine_defaults engine;
  request_limits limits;
  directory_retention retention;
  scheduler_settings scheduler;
  reconfigure_settings reconfigure;
  migration_settings migration;
  /// How `up` starts a process on a host other than localhost; {host} and {command}
  /// are substituted.
  std::string launch_command = "ssh {host} {command}";
  std::vector<std::string> caf_args;  // "--scheduler.max-threads=2", ...
  std::vector<std::string> head_caf_args;  // `head.caf`: the head process only, after `caf`
  http_config http;
  ucx_config ucx;

  const node_config* find_node(const std::string& node_name) const;
  /// The CAF settings of the head and node processes: BASP drops a silent connection a second
  /// after heartbeat.dead_after_ms, the cluster's own grace for a stopped peer, then the
  /// file's `caf:` section, which wins.
  std::vector<std::string> process_caf_args() const;
  /// The head's: process_caf_args, then one scheduler thread (the head's actors pass messages
  /// and never compute for long, and a second thread costs the head CPU in wakeups between the
  /// two: docs/performance.md, "Head CPU per request"), then the file's `head.caf`, which wins.
  std::vector<std::string> head_process_caf_args() const;
};

/// Loads and validates `path`; throws config_error with a one-line message.
cluster_config load_cluster_config(const std::string& path);

/// Same, from text (for tests); `file_label` names it in errors, relative paths in
/// the text resolve against `base_dir`.
cluster_config parse_cluster_config(const std::string& text, const std::string& file_label,
                                    const std::string& base_dir);

using config::set_profile;

/// True when `host` names this machine (only those are launched without the template).
bool is_local_host(const std::string& host);

}  // namespace dls::runtime
