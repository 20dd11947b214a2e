#include "kernels/reference/linear.hpp"

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/reference/round_to_dtype.hpp"

namespace bigtrain::kernels::reference {

template <typename T>
void linear_forward(const LinearSpec& s, const T* x, const T* w, const T* b, T* y) {
  for (std::int64_t n = 0; n < s.batch; ++n)
    for (std::int64_t o = 0; o < s.out_features; ++o) {
      double sum = b != nullptr ? static_cast<double>(b[o]) : 0.0;
      for (std::int64_t i = 0; i < s.in_features; ++i)
        sum += static_cast<double>(x[n * s.in_features + i]) * static_cast<double>(w[o * s.in_features + i]);
      y[n * s.out_features + o] = static_cast<T>(sum);
    }
}

template <typename T>
void linear_backward_data(const LinearSpec& s, const T* dy, const T* w, T* dx) {
  for (std::int64_t n = 0; n < s.batch; ++n)
    for (std::int64_t i = 0; i < s.in_features; ++i) {
      double sum = 0.0;
      for (std::int64_t o = 0; o < s.out_features; ++o)
        sum += static_cast<double>(dy[n * s.out_features + o]) * static_cast<double>(w[o * s.in_features + i]);
      dx[n * s.in_features + i] = static_cast<T>(sum);
    }
}

template <typename T>
void linear_backward_weights(const LinearSpec& s, const T* x, const T* dy, T* dw, T* db) {
  for (std::int64_t o = 0; o < s.out_features; ++o) {
    for (std::int64_t i = 0; i < s.in_features; ++i) {
      double sum = 0.0;
      for (std::int64_t n = 0; n < s.batch; ++n)
        sum += static_cast<double>(dy[n * s.out_features + o]) * static_cast<double>(x[n * s.in_features + i]);
      dw[o * s.in_features + i] = static_cast<T>(sum);
    }
    if (db != nullptr) {
      double sum = 0.0;
      for (std::int64_t n = 0; n < s.batch; ++n) sum += dy[n * s.out_features + o];
      db[o] = static_cast<T>(sum);
    }
  }
}

template void linear_forward<float>(const LinearSpec&, const float*, const float*, const float*, float*);
template void linear_forward<double>(const LinearSpec&, const double*, const double*, const double*, double*);
template void linear_backward_data<float>(const LinearSpec&, const float*, const float*, float*);
template void linear_backward_data<double>(const LinearSpec&, const double*, const double*, double*);
template void linear_backward_weights<float>(const LinearSpec&, const float*, const float*, float*, float*);
template void linear_backward_weights<double>(const LinearSpec&, const double*, const double*, double*, double*);

namespace {

class ReferenceLinear final : public Linear {
 public:
  explicit ReferenceLinear(const LinearSpec& spec) : spec_(spec) {}
  // Bias added, and dbias summed, in float32 from the unrounded values (the CUDA
  // backend's bias kernels work on the float32 tensors).
  void forward(const Tensor& x, const Tensor& weight, const Tensor* bias, Tensor& y) override {
    linear_forward(spec_, in(x).get(), in(weight).get(), bias ? bias->f32() : nullptr, y.f32());
  }
  void backward_data(const Tensor& dy, const Tensor& weight, Tensor& dx) override {
    linear_backward_data(spec_, in(dy).get(), in(weight).get(), dx.f32());
  }
  void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dweight, Tensor* dbias) override {
    linear_backward_weights<float>(spec_, in(x).get(), in(dy).get(), dweight.f32(), nullptr);
    if (dbias != nullptr) {
      const float* g = dy.f32();
      for (std::int64_t o = 0; o < spec_.out_features; ++o) {
        double sum = 0.0;
        for (std::int64_t n = 0; n < spec_.batch; ++n) sum += g[n * spec_.out_features + o];
        dbias->f32()[o] = static_cast<float>(sum);
      }
    }
  }

 private:
  RoundedOperand in(const Tensor& t) const { return RoundedOperand(t, spec_.compute_dtype); }
  LinearSpec spec_;
};

}  // namespace

std::unique_ptr<Linear> make_linear(const LinearSpec& spec) { return std::make_unique<ReferenceLinear>(spec); }

}  // namespace bigtrain::kernels::reference
