// A straightforward scalar forward pass in double precision, for testing the
// engine's MoE and MLA paths: weights dequantized whole, full K and V formed
// per position (MLA not absorbed), each expert run token by token, routing
// written out again from the definitions. Slow; for tiny models only.
#pragma once

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "core/quant.h"
#include "gguf/gguf.h"
#include "model/config.h"

namespace shardlm::test {

class ReferenceForward {
 public:
  using Vec = std::vector<double>;

  explicit ReferenceForward(const gguf::File& f) : f_(f), c_(ModelConfig::from_gguf(f)) {}

  // Logits after every position of `tokens` (one sequence from position 0).
  std::vector<Vec> run(const std::vector<int32_t>& tokens) {
    const int64_t n = int64_t(tokens.size());
    std::vector<Vec> x(static_cast<size_t>(n));
    for (int64_t t = 0; t < n; ++t) x[size_t(t)] = row("token_embd.weight", tokens[size_t(t)]);
    for (int64_t l = 0; l < c_.n_layer; ++l) {
      const std::string b = "blk." + std::to_string(l) + ".";
      std::vector<Vec> xn(static_cast<size_t>(n));
      for (int64_t t = 0; t < n; ++t) xn[size_t(t)] = norm(x[size_t(t)], b + "attn_norm.weight");
      const auto att = c_.latent_attention() ? latent_attention(b, xn) : attention(b, xn);
      for (int64_t t = 0; t < n; ++t) add(x[size_t(t)], matvec(b + "attn_output.weight", att[size_t(t)]));
      for (int64_t t = 0; t < n; ++t) {
        const Vec h = norm(x[size_t(t)], b + "ffn_norm.weight");
        add(x[size_t(t)], c_.layer_has_experts(l) ? experts(b, h) : ffn(b, "", h));
      }
    }
    std::vector<Vec> logits;
    for (auto& v : x)
      logits.push_back(matvec(c_.tied_output ? "token_embd.weight" : "output.weight", norm(v, "output_norm.weight")));
    return logits;
  }

 private:
  struct Tensor {
    int64_t cols = 0, rows = 0;
    Vec v;
  };

  const Tensor& tensor(const std::string& name) {
    auto it = cache_.find(name);
    if (it != cache_.end()) return it->second;
    const auto& t = f_.require_tensor(name);
    Tensor out;
    out.cols = t.ne[0];
    out.rows = t.n_elements() / t.ne[0];
    std::vector<float> r(size_t(out.cols));
    for (int64_t i = 0; i < out.rows; ++i) {
      dequantize_row(t.type, static_cast<const uint8_t*>(t.data) + size_t(i) * t.row_size(), r.data(), out.cols);
      out.v.insert(out.v.end(), r.begin(), r.end());
    }
    return cache_[name] = std::move(out);
  }
  Vec row(const std::string& name, int64_t r) {
    const auto& t = tensor(name);
    return Vec(t.v.begin() + r * t.cols, t.v.begin() + (r + 1) * t.cols);
  }
  // Rows [first, first + count) of the tensor times x.
  Vec matvec(const std::string& name, const Vec& x, int64_t first = 0, int64_t count = -1) {
    const auto& t = tensor(name);
    if (count < 0) count = t.rows;
    Vec y(static_cast<size_t>(count));
    for (int64_t r = 0; r < count; ++r)
      for (int64_t k = 0; k < t.cols; ++k) y[size_t(r)] += t.v[size_t((first + r) * t.cols + k)] * x[size_t(k)];
    return y;
  }
  static void add(Vec& a, const Vec& b) {
    for (size_t i = 0; i < a.size(); ++i) a[i] += b[i];
  }
  Vec norm(const Vec& x, const std::string& weight, size_t first = 0, size_t n = 0) {
    if (n == 0) n = x.size() - first;
    double ss = 0;
    for (size_t i = 0; i < n; ++i) ss += x[first + i] * x[first + i];
    const double s = 1.0 / std::sqrt(ss / double(n) + double(c_.rms_eps));
    const auto& w = tensor(weight).v;
    Vec y(n);
    for (size_t i = 0; i < n; ++i) y[i] = x[first + i] * s * w[i];
    return y;
  }
  // Rotates dims [first, first + rope.dims) of x at position pos.
  void rope(Vec& x, size_t first, int64_t pos) {
    const auto& r = c_.rope;
    const int64_t pairs = r.dims / 2;
    double low = 0, high = 0, magnitude = 1;
    if (r.yarn) {
      auto pair_for = [&](double turns) {
        return double(r.dims) * std::log(double(r.yarn_orig_ctx) / (turns * 2 * M_PI)) / (2 * std::log(double(r.freq_base)));
      };
      low = std::max(0.0, std::floor(pair_for(r.yarn_beta_fast)));
      high = std::min(double(r.dims - 1), std::ceil(pair_for(r.yarn_beta_slow)));
      if (!c_.latent_attention()) magnitude = r.yarn_attn_factor * (1 + 0.1 * std::log(1.0 / r.freq_scale));
    }
    for (int64_t i = 0; i < pairs; ++i) {
      const double extrapolated = double(pos) * std::pow(double(r.freq_base), -2.0 * double(i) / double(r.dims));
      double angle = extrapolated * r.freq_scale;
      if (r.yarn) {
        const double ramp = 1 - std::clamp((double(i) - low) / std::max(0.001, high - low), 0.0, 1.0);
        angle = angle * (1 - ramp) + extrapolated * ramp;
      }
      const bool neox = r.style == RopeStyle::NeoxHalves;
      double& a = x[first + size_t(neox ? i : 2 * i)];
      double& b = x[first + size_t(neox ? i + pairs : 2 * i + 1)];
      const double c = std::cos(angle) * magnitude, s = std::sin(angle) * magnitude, a0 = a, b0 = b;
      a = a0 * c - b0 * s;
      b = a0 * s + b0 * c;
    }
  }
  // Causal attention of per-head q, k, v (each [position][head] vectors).
  std::vector<Vec> attend(const std::vector<std::vector<Vec>>& q, const std::vector<std::vector<Vec>>& k,
                          const std::vector<std::vector<Vec>>& v, int64_t group, double scale) {
    std::vector<Vec> out(q.size());
    for (size_t t = 0; t < q.size(); ++t)
      for (size_t h = 0; h < q[t].size(); ++h) {
        const size_t g = h / size_t(group);
        Vec s(t + 1);
        for (size_t p = 0; p <= t; ++p)
          s[p] = scale * std::inner_product(q[t][h].begin(), q[t][h].end(), k[p][g].begin(), 0.0);
        const double mx = *std::max_element(s.begin(), s.end());
        double sum = 0;
        for (auto& e : s) sum += e = std::exp(e - mx);
        Vec o(v[0][g].size());
        for (size_t p = 0; p <= t; ++p)
          for (size_t d = 0; d < o.size(); ++d) o[d] += s[p] / sum * v[p][g][d];
        out[t].insert(out[t].end(), o.begin(), o.end());
      }
    return out;
  }
  static std::vector<Vec> split(const Vec& x, int64_t heads) {
    const size_t d = x.size() / size_t(heads);
    std::vector<Vec> out;
    for (int64_t h = 0; h < heads; ++h) out.emplace_back(x.begin() + h * d, x.begin() + (h + 1) * d);
    return out;
  }

  std::vector<Vec> attention(const std::string& b, const std::vector<Vec>& xn) {
    std::vector<std::vector<Vec>> q, k, v;
    for (size_t t = 0; t < xn.size(); ++t) {
      Vec qt = matvec(b + "attn_q.weight", xn[t]), kt = matvec(b + "attn_k.weight", xn[t]),
          vt = matvec(b + "attn_v.weight", xn[t]);
      if (c_.attention.qkv_bias) {
        add(qt, tensor(b + "attn_q.bias").v);
        add(kt, tensor(b + "attn_k.bias").v);
        add(vt, tensor(b + "attn_v.bias").v);
      }
      auto qh = split(qt, c_.n_head), kh = split(kt, c_.n_head_kv);
      for (auto* heads : {&qh, &kh})
        for (auto& h : *heads) {
          if (c_.attention.qk_norm) h = norm(h, b + (heads == &qh ? "attn_q_norm.weight" : "attn_k_norm.weight"));
          rope(h, 0, int64_t(t));
        }
      q.push_back(qh);
      k.push_back(kh);
      v.push_back(split(vt, c_.n_head_kv));
    }
    return attend(q, k, v, c_.n_group(), 1.0 / std::sqrt(double(c_.head_dim_k)));
  }

  std::vector<Vec> latent_attention(const std::string& b, const std::vector<Vec>& xn) {
    const auto& a = c_.attention.latent;
    const int64_t H = c_.n_head, nope = a.qk_nope_dim, lora = a.kv_lora_rank;
    std::vector<std::vector<Vec>> q, k, v;
    for (size_t t = 0; t < xn.size(); ++t) {
      const Vec qt = a.q_lora_rank > 0
                         ? matvec(b + "attn_q_b.weight", norm(matvec(b + "attn_q_a.weight", xn[t]), b + "attn_q_a_norm.weight"))
                         : matvec(b + "attn_q.weight", xn[t]);
      auto qh = split(qt, H);
      Vec kv = matvec(b + "attn_kv_a_mqa.weight", xn[t]);
      const Vec latent = norm(kv, b + "attn_kv_a_norm.weight", 0, size_t(lora));
      rope(kv, size_t(lora), int64_t(t));
      std::vector<Vec> kh, vh;
      for (int64_t h = 0; h < H; ++h) {
        rope(qh[size_t(h)], size_t(nope), int64_t(t));
        Vec kn(static_cast<size_t>(nope)), vv(static_cast<size_t>(a.v_dim));
        if (a.joined_kv_b) {
          kn = matvec(b + "attn_kv_b.weight", latent, h * (nope + a.v_dim), nope);
          vv = matvec(b + "attn_kv_b.weight", latent, h * (nope + a.v_dim) + nope, a.v_dim);
        } else {
          const auto& kb = tensor(b + "attn_k_b.weight").v;  // [nope, lora, H]
          for (int64_t d = 0; d < nope; ++d)
            for (int64_t cc = 0; cc < lora; ++cc) kn[size_t(d)] += kb[size_t((h * lora + cc) * nope + d)] * latent[size_t(cc)];
          vv = matvec(b + "attn_v_b.weight", latent, h * a.v_dim, a.v_dim);  // [lora, v, H]
        }
        kn.insert(kn.end(), kv.begin() + lora, kv.end());  // + the shared roped key
        kh.push_back(kn);
        vh.push_back(vv);
      }
      q.push_back(qh);
      k.push_back(kh);
      v.push_back(vh);
    }
    const auto& r = c_.rope;
    const double mscale = r.yarn ? r.yarn_attn_factor * (1 + r.yarn_log_multiplier * std::log(1.0 / r.freq_scale)) : 1.0;
    return attend(q, k, v, 1, mscale * mscale / std::sqrt(double(a.qk_dim())));
  }

  Vec ffn(const std::string& b, const std::string& suffix, const Vec& x, int64_t first = 0, int64_t rows = -1) {
    Vec g = matvec(b + "ffn_gate" + suffix + ".weight", x, first, rows);
    const Vec u = matvec(b + "ffn_up" + suffix + ".weight", x, first, rows);
    for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1 + std::exp(-g[i])) * u[i];
    const auto& down = tensor(b + "ffn_down" + suffix + ".weight");
    const int64_t d = c_.n_embd, e = first / std::max<int64_t>(1, int64_t(g.size()));
    Vec y(static_cast<size_t>(d));
    for (int64_t r = 0; r < d; ++r)
      for (size_t k = 0; k < g.size(); ++k) y[size_t(r)] += down.v[size_t((e * d + r) * down.cols) + k] * g[k];
    return y;
  }

  Vec experts(const std::string& b, const Vec& x) {
    const auto& m = c_.moe;
    const int64_t n = m.n_expert;
    Vec p = matvec(b + "ffn_gate_inp.weight", x);
    if (m.gating == ExpertGating::Softmax) {
      const double mx = *std::max_element(p.begin(), p.end());
      double sum = 0;
      for (auto& e : p) sum += e = std::exp(e - mx);
      for (auto& e : p) e /= sum;
    } else {
      for (auto& e : p) e = 1 / (1 + std::exp(-e));
    }
    Vec sel = p;
    if (m.selection_bias) add(sel, tensor(b + "exp_probs_b.bias").v);
    std::vector<bool> eligible(size_t(n), true);
    if (m.n_group > 1) {
      const int64_t per = n / m.n_group;
      std::vector<std::pair<double, int64_t>> groups;
      for (int64_t g = 0; g < m.n_group; ++g) {
        Vec s(sel.begin() + g * per, sel.begin() + (g + 1) * per);
        std::sort(s.rbegin(), s.rend());
        groups.push_back({-(s[0] + (per > 1 ? s[1] : 0)), g});
      }
      std::sort(groups.begin(), groups.end());
      for (int64_t g = m.n_group_used; g < m.n_group; ++g)
        for (int64_t e = 0; e < per; ++e) eligible[size_t(groups[size_t(g)].second * per + e)] = false;
    }
    std::vector<std::pair<double, int64_t>> order;
    for (int64_t e = 0; e < n; ++e)
      if (eligible[size_t(e)]) order.push_back({-sel[size_t(e)], e});
    std::sort(order.begin(), order.end());
    double sum = 0;
    for (int64_t i = 0; i < m.n_expert_used; ++i) sum += p[size_t(order[size_t(i)].second)];
    Vec y(static_cast<size_t>(c_.n_embd));
    for (int64_t i = 0; i < m.n_expert_used; ++i) {
      const int64_t e = order[size_t(i)].second;
      const double w = p[size_t(e)] / (m.weights_norm ? sum : 1.0) * m.weights_scale;
      const Vec o = ffn(b, "_exps", x, e * m.n_ff_expert, m.n_ff_expert);
      for (size_t d = 0; d < y.size(); ++d) y[d] += w * o[d];
    }
    if (m.n_shared > 0) add(y, ffn(b, "_shexp", x));
    return y;
  }

  const gguf::File& f_;
  ModelConfig c_;
  std::map<std::string, Tensor> cache_;
};

}  // namespace shardlm::test
