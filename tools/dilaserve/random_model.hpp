#pragma once
// A LLaDA-shaped model folder with random weights and the shipped model's tokenizer, so a live
// cluster can run steps of realistic size (bench-runtime, bench-migration).
#include <filesystem>
#include <string>

namespace dls::cli {

/// Writes config.json, model.safetensors and tokenizer.json into `dir`: the model of `shipped`
/// with `d_model` (64 per head), `layers` and `max_seq`; returns `dir`.
std::string write_random_model(const std::filesystem::path& dir, const std::string& shipped, int d_model, int layers,
                               int max_seq = 0);

}  // namespace dls::cli
