#include "gpu/dream_schedule.hpp"

#include <cmath>

namespace dls::gpu {

float dream_timestep(int steps, int i, double eps) {
  const int64_t n = int64_t{steps} + 1;  // points
  const float start = 1.0f, end = static_cast<float>(eps);  // torch.linspace takes the Python float as float32
  const float step = (end - start) / static_cast<float>(n - 1);
  if (i < n / 2) return std::fma(step, static_cast<float>(i), start);
  return std::fma(-step, static_cast<float>(n - 1 - i), end);
}

float dream_transfer_probability(int steps, int i, double eps) {
  if (i >= steps - 1) return 1.0f;
  const float t = dream_timestep(steps, i, eps), s = dream_timestep(steps, i + 1, eps);
  return 1.0f - s / t;
}

int dream_transfer_count(int masks, int steps, int i, double eps) {
  if (i >= steps - 1) return masks;
  // num_mask_token is a float32 tensor (mask_index.sum() / batch), the product float32 too.
  const float n = static_cast<float>(masks) * dream_transfer_probability(steps, i, eps);
  return static_cast<int>(n);
}

}  // namespace dls::gpu
