// oneDNN's Winograd against direct on ResNet-18's 3x3 stride-1 convolution shapes, plain oneDNN
// (no Kiln), interleaved rounds, best and median per candidate (issue 9):
//
//   build/bench/runtime/runtime_winograd_conv_probe BATCH [ROUNDS]
//
// Candidates: direct on NHWC (what Kiln's AVX-512 plan keeps between convolutions: brgconv),
// direct on nChw16c, Winograd on nChw16c, and Winograd fed from and to NHWC (its reorders
// included: what Kiln runs when it takes Winograd in an NHWC plan). ReLU post-op, bias.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <oneapi/dnnl/dnnl.hpp>
#include <random>
#include <string>
#include <vector>
using namespace dnnl;
using tag = memory::format_tag;
using dt = memory::data_type;
using clk = std::chrono::steady_clock;

struct Cand {
  std::string name, impl;
  std::function<void()> run;
  std::vector<double> t;
};

int main(int argc, char** argv) {
  int N = argc > 1 ? atoi(argv[1]) : 1;
  int rounds = argc > 2 ? atoi(argv[2]) : 7;
  engine eng(engine::kind::cpu, 0);
  stream s(eng);
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.f, 1.f);
  int layers[][2] = {{64, 56}, {128, 28}, {256, 14}, {512, 7}};
  for (auto& l : layers) {
    int C = l[0], K = l[0], H = l[1];
    memory::dims sd{N, C, H, H}, wd{K, C, 3, 3}, dd{N, K, H, H};
    std::vector<float> x((size_t)N * C * H * H), w((size_t)K * C * 9), b(K);
    for (auto& v : x) v = std::fabs(nd(rng));
    for (auto& v : w) v = nd(rng) * std::sqrt(2.f / (C * 9));
    for (auto& v : b) v = nd(rng) * 0.1f;
    memory::desc nhwc_s(sd, dt::f32, tag::nhwc), nhwc_d(dd, dt::f32, tag::nhwc);
    memory xs(nhwc_s, eng), ys(nhwc_d, eng);
    {
      memory ux({sd, dt::f32, tag::nchw}, eng, x.data());
      reorder(ux, xs).execute(s, ux, xs);
    }
    memory uw({wd, dt::f32, tag::oihw}, eng, w.data()), ub({{K}, dt::f32, tag::a}, eng, b.data());
    primitive_attr attr;
    post_ops po;
    po.append_eltwise(1.f, algorithm::eltwise_relu, 0.f, 0.f);
    attr.set_post_ops(po);
    std::vector<Cand> cands;
    auto add = [&](const char* name, algorithm alg, tag t, bool from_nhwc) {
      memory::desc sa(sd, dt::f32, t), da(dd, dt::f32, t), wa(wd, dt::f32, tag::any);
      try {
        convolution_forward::desc d(prop_kind::forward_inference, alg, sa, wa, ub.get_desc(), da,
                                    {1, 1}, {1, 1}, {1, 1});
        auto pd = convolution_forward::primitive_desc(d, attr, eng);
        auto pw = std::make_shared<memory>(pd.weights_desc(), eng);
        reorder(uw, *pw).execute(s, uw, *pw);
        auto conv = std::make_shared<convolution_forward>(pd);
        bool rx = from_nhwc && pd.src_desc() != nhwc_s, ry = from_nhwc && pd.dst_desc() != nhwc_d;
        auto px =
            std::make_shared<memory>(pd.src_desc() != nhwc_s ? memory(pd.src_desc(), eng) : xs);
        auto py =
            std::make_shared<memory>(pd.dst_desc() != nhwc_d ? memory(pd.dst_desc(), eng) : ys);
        if (pd.src_desc() != nhwc_s) reorder(xs, *px).execute(s, xs, *px);
        auto rin = std::make_shared<reorder>(xs, *px);
        auto rout = std::make_shared<reorder>(*py, ys);
        Cand c{name, std::string(pd.impl_info_str()) + (rx ? "+reorders" : ""), nullptr, {}};
        c.run = [=, &s, &xs, &ys, &ub] {
          if (rx) rin->execute(s, xs, *px);
          conv->execute(s, {{DNNL_ARG_SRC, *px},
                            {DNNL_ARG_WEIGHTS, *pw},
                            {DNNL_ARG_BIAS, ub},
                            {DNNL_ARG_DST, *py}});
          if (ry) rout->execute(s, *py, ys);
          s.wait();
        };
        cands.push_back(c);
      } catch (const dnnl::error& e) {
        printf("  %s: none\n", name);
      }
    };
    add("direct/nhwc", algorithm::convolution_direct, tag::nhwc, false);
    add("direct/16c", algorithm::convolution_direct, tag::nChw16c, false);
    add("wino/16c", algorithm::convolution_winograd, tag::nChw16c, false);
    add("wino/nhwc+ro", algorithm::convolution_winograd, tag::any, true);
    for (auto& c : cands) c.run();
    int iters = N == 1 ? 20 : 2;
    for (int r = 0; r < rounds; ++r)
      for (auto& c : cands) {
        auto t0 = clk::now();
        for (int i = 0; i < iters; ++i) c.run();
        c.t.push_back(std::chrono::duration<double, std::milli>(clk::now() - t0).count() / iters);
      }
    double flop = 2.0 * N * K * H * H * C * 9;
    printf("N=%d C=K=%d H=W=%d\n", N, C, H);
    double base = 0;
    for (auto& c : cands) {
      std::sort(c.t.begin(), c.t.end());
      double med = c.t[c.t.size() / 2];
      if (base == 0) base = c.t[0];
      printf(
          "  %-12s %-44s min %8.3f ms  median %8.3f  %6.1f GF/s(min)  %.2fx of direct/nhwc (min)\n",
          c.name.c_str(), c.impl.c_str(), c.t[0], med, flop / c.t[0] / 1e6, base / c.t[0]);
    }
  }
}
