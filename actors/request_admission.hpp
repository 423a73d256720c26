#pragma once
// The request checker of a cluster file: its `limits:` plus the model's context and
// tokenizer, read from model.path. Built by the head for every submit it accepts and by
// the CLI before it sends one.
#include "runtime/cluster_config.hpp"
#include "runtime/messages.hpp"
#include "runtime/request_limits.hpp"

#include <memory>
#include <optional>
#include <string>

namespace dls::actors {

/// When the model cannot be read here (e.g. it exists only on the nodes), `*problem` says
/// why and the checker bounds only bytes and numbers; the nodes still refuse a request
/// that does not fit the model.
std::shared_ptr<const runtime::request_checker> make_request_checker(const runtime::cluster_config& cfg,
                                                                     std::string* problem = nullptr);

/// The explicit answer to a submit that `checker` refuses, or whose decode settings, the
/// cluster's `engine` ones with the request's own, are not one decode (echoing its tag), or nothing.
std::optional<runtime::answer> refusal(const runtime::request_checker& checker, const common::decode_settings& engine,
                                       const runtime::submit_spec& spec);

}  // namespace dls::actors
