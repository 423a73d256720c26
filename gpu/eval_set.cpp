#include "gpu/eval_set.hpp"

#include "gpu/safetensors.hpp"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

namespace dls::gpu {

bool eval_problem::accepts(const std::string& answer) const {
  return std::find(valid.begin(), valid.end(), answer) != valid.end();
}

std::vector<eval_problem> load_eval_set(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw load_error(path + ": cannot open eval set");
  std::vector<eval_problem> out;
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(lineno) + ": ";
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const std::exception& e) {
      throw load_error(where + "not valid JSON");
    }
    eval_problem p;
    if (!j.is_object() || !j.contains("prompt") || !j["prompt"].is_string())
      throw load_error(where + "missing string field 'prompt'");
    p.prompt = j["prompt"].get<std::string>();
    p.task = j.value("task", std::string("default"));
    if (j.contains("answer") && j["answer"].is_string()) p.valid.push_back(j["answer"].get<std::string>());
    if (j.contains("valid") && j["valid"].is_array())
      for (const auto& v : j["valid"])
        if (v.is_string()) p.valid.push_back(v.get<std::string>());
    if (p.valid.empty()) throw load_error(where + "needs 'answer' or a non-empty 'valid' list");
    if (j.contains("gen_length")) {
      if (!j["gen_length"].is_number_integer() || j["gen_length"].get<int>() <= 0)
        throw load_error(where + "'gen_length' must be a positive integer");
      p.gen_length = j["gen_length"].get<int>();
    }
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace dls::gpu
