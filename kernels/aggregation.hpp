#pragma once
// Small ops of the tile aggregators (net/aggregator*): reductions over the tile
// axis of a feature matrix H [N,D] and the element-wise pieces of gated attention
// (Ilse et al. 2018). All float32; N is the number of tiles of one image.
#include "kernels/core/tensor.hpp"

namespace bigtrain::kernels {

// z[d] = mean_i H[i,d];  dH[i,d] = dz[d] / N.
void mean_rows_forward(Backend backend, const Tensor& h, Tensor& z);
void mean_rows_backward(Backend backend, const Tensor& dz, Tensor& dh);

// z[d] = max_i H[i,d], argmax[d] (i32) = the first i reaching it (PyTorch's max
// picks one row too: the gradient goes to one tile, not split among ties).
void max_rows_forward(Backend backend, const Tensor& h, Tensor& z, Tensor& argmax);
// dH = 0 except dH[argmax[d], d] = dz[d]. Overwrites dh.
void max_rows_backward(Backend backend, const Tensor& dz, const Tensor& argmax, Tensor& dh);

// Element-wise; y may alias x. Backward uses the forward output y.
void tanh_forward(Backend backend, const Tensor& x, Tensor& y);
void tanh_backward(Backend backend, const Tensor& y, const Tensor& dy, Tensor& dx);  // dx = dy (1 - y^2)
void sigmoid_forward(Backend backend, const Tensor& x, Tensor& y);
void sigmoid_backward(Backend backend, const Tensor& y, const Tensor& dy, Tensor& dx);  // dx = dy y (1 - y)
void multiply(Backend backend, const Tensor& a, const Tensor& b, Tensor& out);  // out may alias a or b

// Softmax over all elements of a vector s [N] (the attention scores of one image),
// computed with the maximum subtracted so large scores do not overflow.
void softmax_forward(Backend backend, const Tensor& s, Tensor& a);
// ds_i = a_i (da_i - sum_j a_j da_j).
void softmax_backward(Backend backend, const Tensor& a, const Tensor& da, Tensor& ds);

// z[d] = sum_i a[i] H[i,d] with a [N].
void weighted_sum_rows_forward(Backend backend, const Tensor& a, const Tensor& h, Tensor& z);
// da[i] = sum_d H[i,d] dz[d];  dH[i,d] = a[i] dz[d]. Overwrites da and dh.
void weighted_sum_rows_backward(Backend backend, const Tensor& a, const Tensor& h, const Tensor& dz, Tensor& da,
                                Tensor& dh);

}  // namespace bigtrain::kernels
