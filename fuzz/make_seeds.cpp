// Writes the seed inputs that only the engine can make: canvas bytes and KV cache wire bytes of
// the shipped tiny model at several points of a real decode, and small valid safetensors files
// in each stored dtype with the checkpoint's own tensor names, and head write-ahead logs holding
// such canvases (whole and torn). Used by fuzz/make_corpus.sh.
#include "gpu/canvas.hpp"
#include "gpu/cpu_backend.hpp"
#include "gpu/engine.hpp"
#include "gpu/model.hpp"
#include "gpu/safetensors.hpp"
#include "gpu/tokenizer.hpp"
#include "runtime/head_journal.hpp"
#include "runtime/peer_snapshot.hpp"
#include "runtime/ucx_frame.hpp"
#include "runtime/wal.hpp"

#include <fstream>
#include <iostream>
#include <string>
#include <vector>

namespace g = dls::gpu;

namespace {

void write(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!f) throw std::runtime_error("cannot write " + path);
}

// The headers of a transfer as the sender cuts it, in the order given, back to back.
std::string frame_headers(uint64_t id, std::size_t total, std::size_t part_bytes, const std::vector<uint32_t>& order) {
  const std::string whole(total, 'k');
  const auto parts = dls::runtime::parts_for(total, part_bytes);
  std::string out;
  for (uint32_t k : order) {
    const auto h = dls::runtime::make_part_header(id, whole, part_bytes, k, parts);
    out.append(reinterpret_cast<const char*>(&h), sizeof h);
  }
  return out;
}

void write_frame_seeds(const std::string& corpus) {
  const auto dir = corpus + "/ucx_frame/";
  write(dir + "whole", frame_headers(1, 1000, 0, {0}));
  write(dir + "four-parts-in-order", frame_headers(2, 1000, 300, {0, 1, 2, 3}));
  write(dir + "four-parts-last-first", frame_headers(3, 1000, 250, {3, 1, 0, 2}));
  write(dir + "two-transfers-interleaved",
        frame_headers(4, 4096, 1024, {0, 1}) + frame_headers(5, 700, 512, {1}) + frame_headers(4, 4096, 1024, {2, 3}) +
            frame_headers(5, 700, 512, {0}));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: fuzz_make_seeds MODEL_DIR CORPUS_DIR\n";
    return 2;
  }
  const std::string model_dir = argv[1], corpus = argv[2];
  try {
    write_frame_seeds(corpus);
    auto m = g::load_model(model_dir);
    auto tok = g::load_tokenizer(model_dir);
    g::engine e(g::make_cpu_backend(m));
    // Short prompts and answers keep the KV seeds small (libFuzzer mutates every byte).
    const std::vector<std::pair<std::string, g::cache_mode>> runs = {
        {"12+7=", g::cache_mode::dual}, {"abc", g::cache_mode::prefix}, {"9*9=", g::cache_mode::none}};
    int n = 0;
    for (const auto& [prompt, cache] : runs) {
      g::decode_params p;
      p.gen_length = 8;
      p.block_length = 4;
      p.cache = cache;
      p.refresh_interval = 2;
      auto slot = e.admit(g::canvas::start(tok->encode(prompt), p, m->config.mask_id, m->config.eos_id));
      for (int step = 0; !slot.c.finished && step < 16; ++step) {
        write(corpus + "/canvas/engine-" + std::to_string(n) + "-" + std::to_string(step), slot.c.to_bytes());
        if (step == 2) {
          const auto c = slot.c.to_bytes();
          dls::runtime::peer_snapshot ps{static_cast<uint64_t>(n + 1), 1, step, step, std::vector<char>(c.begin(), c.end())};
          write(corpus + "/peer_snapshot/engine-" + std::to_string(n), dls::runtime::encode_peer_snapshot(ps));
        }
        if (step == 1) write(corpus + "/kv_wire/engine-" + std::to_string(n) + "-" + std::to_string(step),
                            slot.cache->export_bytes());
        e.step({&slot});
      }
      write(corpus + "/canvas/engine-" + std::to_string(n) + "-done", slot.c.to_bytes());
      if (n == 0) {
        // A head's log as it reads after serving this request part of the way: every kind of
        // record, a canvas of the real decode among them.
        namespace rt = dls::runtime;
        rt::journal_request r;
        r.id = 1;
        r.key = "0123456789abcdef-0";
        r.spec.prompt = prompt;
        r.spec.gen_length = p.gen_length;
        r.arrival_unix_ms = 1764590000000;
        auto bytes = slot.c.to_bytes();
        std::vector<char> canvas(bytes.begin(), bytes.end());
        rt::answer a;
        a.request_id = 2;
        a.ok = true;
        a.text = "42";
        auto r2 = r;
        r2.id = 2;
        r2.key = "0123456789abcdef-1";
        std::string image(rt::wal_magic());
        for (const auto& rec : {rt::encode_port(6390), rt::encode_joined("node0", 1), rt::encode_layout("node0", {1, 1}),
                                rt::encode_policy("dilaserve"), rt::encode_accepted(r), rt::encode_accepted(r2),
                                rt::encode_snapshot(1, canvas, 4, 8), rt::encode_finished(2, r2.key, a)})
          image += rt::frame_wal_record(rec);
        write(corpus + "/wal/head-log", image);
        write(corpus + "/wal/head-log-torn", image.substr(0, image.size() - 5));
      }
      ++n;
    }
    // Dream's origin rule and its linear schedule (steps that commit nothing among them), mid-block.
    for (auto rule : {g::commit_rule::origin, g::commit_rule::quota}) {
      g::decode_params p;
      p.gen_length = 8;
      p.block_length = 4;
      p.rule = rule;
      p.steps_per_block = 6;
      p.schedule = g::step_schedule::dream_linear;
      p.seed = 5;
      auto slot = e.admit(g::canvas::start(tok->encode("7+5="), p, m->config.mask_id, m->config.eos_id));
      for (int step = 0; step < 2; ++step) e.step({&slot});
      write(corpus + "/canvas/dream-" + g::to_string(rule), slot.c.to_bytes());
    }
    // Valid small checkpoints, one per dtype, named like the real one's first tensors.
    g::safetensors_file real(model_dir + "/model.safetensors");
    std::vector<std::pair<std::string, std::vector<int64_t>>> shapes;
    for (const auto& [name, t] : real.tensors()) {
      shapes.push_back({name, t.shape.size() == 1 ? std::vector<int64_t>{4} : std::vector<int64_t>{2, 3}});
      if (shapes.size() == 3) break;
    }
    const std::vector<float> values = {0.5f, -1.25f, 3.0f, 0.0f, 1e-3f, -7.5f};
    const std::vector<const float*> data(shapes.size(), values.data());
    write_safetensors_f32(corpus + "/safetensors/small-f32", shapes, data, g::dtype::f32);
    write_safetensors_f32(corpus + "/safetensors/small-bf16", shapes, data, g::dtype::bf16);
    write_safetensors_f32(corpus + "/safetensors/small-f16", shapes, data, g::dtype::f16);
  } catch (const std::exception& ex) {
    std::cerr << "fuzz_make_seeds: " << ex.what() << "\n";
    return 1;
  }
  return 0;
}
