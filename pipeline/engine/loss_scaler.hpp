#pragma once
// Dynamic loss scaling for train.precision fp16, with torch.cuda.amp.GradScaler's
// state machine and defaults. fp16's range ends at 65504 and its subnormals at
// 2^-24, so small gradients would flush to zero in the 16-bit backward pass; the
// loss gradient is multiplied by scale() so they stay representable, and the
// float32 gradients are divided by it again before clipping and the optimizer step.
// A step whose gradients came out non-finite (the scale was too large) is skipped
// and the scale multiplied by backoff_factor; after growth_interval consecutive
// finite steps it is multiplied by growth_factor.
#include <cstdint>
#include <string>

namespace bigtrain {

struct LossScalerOptions {
  bool enabled = false;  // disabled: scale() is 1 and every step is taken
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  std::int64_t growth_interval = 2000;
};

class LossScaler {
 public:
  explicit LossScaler(const LossScalerOptions& options = {});

  bool enabled() const { return options_.enabled; }
  float scale() const { return enabled() ? static_cast<float>(scale_) : 1.0f; }
  // Finite steps since the last change of the scale (GradScaler's growth tracker).
  std::int64_t growth_tracker() const { return growth_tracker_; }

  // After the gradients of a step are complete: whether the optimizer may step with
  // them (false: skip the step, the scale has been lowered). Moves the scale as
  // GradScaler.update() does.
  bool update(bool found_non_finite);

  // The state a checkpoint keeps so a resumed run continues with the same scale.
  std::string to_json() const;
  // Throws bigtrain::Error naming `source` when the text is not a saved state.
  void restore(const std::string& json, const std::string& source);

 private:
  LossScalerOptions options_;
  double scale_;
  std::int64_t growth_tracker_ = 0;
};

}  // namespace bigtrain
