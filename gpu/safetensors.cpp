#include "gpu/safetensors.hpp"

#include "gpu/dtype.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

namespace dls::gpu {

std::size_t dtype_size(dtype t) { return t == dtype::f32 ? 4 : 2; }

const char* dtype_name(dtype t) {
  switch (t) {
    case dtype::f32: return "F32";
    case dtype::bf16: return "BF16";
    case dtype::f16: return "F16";
  }
  return "?";
}

int64_t tensor_view::numel() const {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

void tensor_view::to_f32(float* out) const {
  const auto n = static_cast<std::size_t>(numel());
  switch (type) {
    case dtype::f32: std::memcpy(out, data, n * 4); break;
    case dtype::bf16:
      for (std::size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, data + 2 * i, 2);
        out[i] = bf16_to_f32(h);
      }
      break;
    case dtype::f16:
      for (std::size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, data + 2 * i, 2);
        out[i] = f16_to_f32(h);
      }
      break;
  }
}

namespace {

// A header is JSON metadata; the largest real checkpoints' headers are a few MB.
constexpr uint64_t max_header_bytes = 100u << 20;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw load_error(path + ": " + what);
}

dtype parse_dtype(const std::string& path, const std::string& name, const std::string& s) {
  if (s == "F32") return dtype::f32;
  if (s == "BF16") return dtype::bf16;
  if (s == "F16") return dtype::f16;
  fail(path, "tensor '" + name + "' has unsupported dtype '" + s + "' (F32, BF16 and F16 load)");
}

}  // namespace

std::map<std::string, tensor_view> parse_safetensors(const unsigned char* base, std::size_t size,
                                                     const std::string& path) {
  if (size < 8)
    fail(path, "truncated: " + std::to_string(size) + " bytes, the 8-byte header length is missing");
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; --i) hlen = (hlen << 8) | base[i];
  if (hlen > size - 8 || hlen > max_header_bytes)
    fail(path, "bad header: header length " + std::to_string(hlen) + " at byte 0 exceeds the file size " +
                   std::to_string(size));
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(base + 8, base + 8 + hlen);
  } catch (const std::exception& e) {
    fail(path, std::string("bad header: JSON between bytes 8 and ") + std::to_string(8 + hlen) + " does not parse (" +
                   e.what() + ")");
  }
  std::map<std::string, tensor_view> tensors;
  try {
    if (!header.is_object()) fail(path, "bad header: the JSON header is not an object");
    const std::size_t data_base = 8 + hlen;
    const std::size_t data_size = size - data_base;
    std::vector<std::pair<std::size_t, std::size_t>> ranges;
    for (auto it = header.begin(); it != header.end(); ++it) {
      if (it.key() == "__metadata__") continue;
      const auto& meta = it.value();
      const std::string& name = it.key();
      if (!meta.is_object() || !meta.contains("dtype") || !meta.contains("shape") ||
          !meta.contains("data_offsets"))
        fail(path, "tensor '" + name + "': header entry lacks dtype, shape or data_offsets");
      tensor_view v;
      v.name = name;
      v.type = parse_dtype(path, name, meta["dtype"].get<std::string>());
      for (const auto& d : meta["shape"]) {
        if (!d.is_number_integer() || d.get<int64_t>() < 0)
          fail(path, "tensor '" + name + "': shape has a negative or non-integer dimension");
        v.shape.push_back(d.get<int64_t>());
      }
      const auto& off = meta["data_offsets"];
      if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
        fail(path, "tensor '" + name + "': data_offsets must be two non-negative integers");
      auto a = off[0].get<std::size_t>(), b = off[1].get<std::size_t>();
      if (b < a) fail(path, "tensor '" + name + "': data_offsets end before they begin");
      if (b > data_size)
        fail(path, "truncated: tensor '" + name + "' ends at byte " + std::to_string(data_base + b) +
                       " but the file has " + std::to_string(size) + " bytes");
      auto expect = static_cast<std::size_t>(v.numel()) * dtype_size(v.type);
      if (b - a != expect)
        fail(path, "tensor '" + name + "': " + std::to_string(b - a) + " data bytes at byte " +
                       std::to_string(data_base + a) + " do not match its shape and dtype (" + std::to_string(expect) +
                       " bytes)");
      v.data = base + data_base + a;
      v.bytes = b - a;
      v.file_offset = data_base + a;
      ranges.emplace_back(a, b);
      tensors.emplace(name, std::move(v));
    }
    std::sort(ranges.begin(), ranges.end());
    for (std::size_t i = 1; i < ranges.size(); ++i)
      if (ranges[i].first < ranges[i - 1].second)
        fail(path, "bad header: tensor data overlap at byte " + std::to_string(data_base + ranges[i].first));
  } catch (const load_error&) {
    throw;
  } catch (const std::exception& e) {
    fail(path, std::string("bad header: ") + e.what());
  }
  return tensors;
}

safetensors_file::safetensors_file(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    fail(path, "cannot stat");
  }
  size_ = static_cast<std::size_t>(st.st_size);
  if (size_ < 8) {
    ::close(fd);
    parse_safetensors(nullptr, size_, path);  // throws the truncation error; an empty file cannot be mapped
  }
  map_ = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    fail(path, "mmap failed");
  }
  try {
    tensors_ = parse_safetensors(static_cast<const unsigned char*>(map_), size_, path);
  } catch (...) {
    ::munmap(map_, size_);
    map_ = nullptr;
    throw;
  }
}

safetensors_file::~safetensors_file() {
  if (map_) ::munmap(map_, size_);
}

void write_safetensors_f32(const std::string& path,
                           const std::vector<std::pair<std::string, std::vector<int64_t>>>& shapes,
                           const std::vector<const float*>& data, dtype stored) {
  nlohmann::json header = nlohmann::json::object();
  std::size_t off = 0;
  std::vector<std::size_t> counts;
  for (const auto& [name, shape] : shapes) {
    std::size_t n = 1;
    for (auto d : shape) n *= static_cast<std::size_t>(d);
    counts.push_back(n);
    std::size_t bytes = n * dtype_size(stored);
    header[name] = {{"dtype", dtype_name(stored)}, {"shape", shape}, {"data_offsets", {off, off + bytes}}};
    off += bytes;
  }
  std::string h = header.dump();
  while (h.size() % 8) h.push_back(' ');
  std::ofstream f(path, std::ios::binary);
  if (!f) throw load_error(path + ": cannot open for writing");
  uint64_t hl = h.size();
  unsigned char lenbuf[8];
  for (int i = 0; i < 8; ++i) lenbuf[i] = static_cast<unsigned char>(hl >> (8 * i));
  f.write(reinterpret_cast<const char*>(lenbuf), 8);
  f.write(h.data(), static_cast<std::streamsize>(h.size()));
  for (std::size_t t = 0; t < data.size(); ++t) {
    if (stored == dtype::f32) {
      f.write(reinterpret_cast<const char*>(data[t]), static_cast<std::streamsize>(counts[t] * 4));
    } else {
      std::vector<uint16_t> buf(counts[t]);
      for (std::size_t i = 0; i < counts[t]; ++i)
        buf[i] = stored == dtype::bf16 ? f32_to_bf16(data[t][i]) : f32_to_f16(data[t][i]);
      f.write(reinterpret_cast<const char*>(buf.data()), static_cast<std::streamsize>(buf.size() * 2));
    }
  }
  if (!f) throw load_error(path + ": write failed");
}

}  // namespace dls::gpu
