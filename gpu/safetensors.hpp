#pragma once
// Memory-mapped reader for the safetensors format: an 8-byte little-endian header length,
// a JSON header mapping tensor names to {dtype, shape, data_offsets}, then raw LE data.
// Every structural problem is reported as a load_error naming the file and the tensor or
// byte offset, because a checkpoint is untrusted input.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace dls::gpu {

/// A checkpoint, config or tokenizer file that cannot be used; what() is one line.
class load_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class dtype { f32, bf16, f16 };

std::size_t dtype_size(dtype t);
const char* dtype_name(dtype t);

struct tensor_view {
  std::string name;
  dtype type = dtype::f32;
  std::vector<int64_t> shape;
  const unsigned char* data = nullptr;  // inside the mapping
  std::size_t bytes = 0;
  std::size_t file_offset = 0;          // absolute offset of the first byte in the file

  int64_t numel() const;
  /// Copies the tensor into `out` as f32 (converting bf16/f16).
  void to_f32(float* out) const;
};

/// Validates a whole safetensors image of `size` bytes at `base` and returns its tensors, which
/// point into `base`; `path` names it in errors. Throws load_error on any inconsistency.
std::map<std::string, tensor_view> parse_safetensors(const unsigned char* base, std::size_t size,
                                                     const std::string& path);

/// A read-only memory mapping of one .safetensors file.
class safetensors_file {
 public:
  /// Maps and validates `path`; throws load_error on any inconsistency.
  explicit safetensors_file(const std::string& path);
  ~safetensors_file();
  safetensors_file(const safetensors_file&) = delete;
  safetensors_file& operator=(const safetensors_file&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, tensor_view>& tensors() const { return tensors_; }

 private:
  std::string path_;
  void* map_ = nullptr;
  std::size_t size_ = 0;
  std::map<std::string, tensor_view> tensors_;
};

/// Writes f32 tensors as a safetensors file (used by tests and benchmarks to make models).
void write_safetensors_f32(const std::string& path,
                           const std::vector<std::pair<std::string, std::vector<int64_t>>>& shapes,
                           const std::vector<const float*>& data, dtype stored = dtype::f32);

}  // namespace dls::gpu
