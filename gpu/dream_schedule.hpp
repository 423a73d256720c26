#pragma once
// Dream's linear schedule (diffusion_generate in Dream's generation_utils.py): step i of `steps`
// runs from t = timesteps[i] to s = timesteps[i + 1], timesteps = torch.linspace(1, eps, steps + 1)
// in float32 (eps: decode_settings::eps, Dream's default 1e-3). The arithmetic is float32 as
// torch's, so the counts are Dream's exactly.
#include <cstdint>

namespace dls::gpu {

/// timesteps[i] of torch.linspace(1, eps, steps + 1): torch's per-element formula (start + step * i
/// below the halfway point, end - step * (n - 1 - i) from it) with a fused multiply-add, as the CUDA
/// kernel Dream runs on computes it. torch's CPU kernel agrees up to 15 points (steps <= 14); beyond,
/// its vector lanes round some entries differently.
float dream_timestep(int steps, int i, double eps);

/// 1 - s/t of step i (float32), or 1 on the last step (i >= steps - 1): origin's p_transfer.
float dream_transfer_probability(int steps, int i, double eps);

/// How many of `masks` still-masked positions step i commits under maskgit_plus, topk_margin and
/// entropy: int(masks * (1 - s/t)) truncated, all of them on the last step (i >= steps - 1). May be 0.
int dream_transfer_count(int masks, int steps, int i, double eps);

}  // namespace dls::gpu
