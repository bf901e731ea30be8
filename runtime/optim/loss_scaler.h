// LossScaler: dynamic loss scaling for f16 (halve on overflow, double after a window of good steps).
#pragma once

namespace strata {

class LossScaler {
 public:
  LossScaler(bool enabled, float initial_scale, int window)
      : enabled_(enabled), scale_(enabled ? initial_scale : 1.0f), window_(window) {}
  bool enabled() const { return enabled_; }
  float scale() const { return scale_; }
  int good_steps() const { return good_steps_; }
  // A checkpoint's state (the scale stays 1 when scaling is off).
  void restore(float scale, int good_steps) {
    if (!enabled_) return;
    scale_ = scale;
    good_steps_ = good_steps;
  }
  // After each step: overflow halves the scale (never below 1), `window` good steps in a row double it.
  void update(bool overflow) {
    if (!enabled_) return;
    if (overflow) {
      scale_ = scale_ > 2.0f ? scale_ * 0.5f : 1.0f;
      good_steps_ = 0;
    } else if (++good_steps_ >= window_) {
      scale_ *= 2.0f;
      good_steps_ = 0;
    }
  }

 private:
  bool enabled_;
  float scale_;
  int window_;
  int good_steps_ = 0;
};

}  // namespace strata
