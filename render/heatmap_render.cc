#include "render/heatmap_render.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tensormorph {
namespace {

constexpr Rgb kBackground = {24, 24, 24};
constexpr Rgb kInk = {230, 230, 230};
constexpr char kZerosLegend[] = "red: induced zeros  blue: pruned zeros";

double Clamp01(double v) {
  return std::isfinite(v) ? std::clamp(v, 0.0, 1.0) : 0;
}

// Zeros against a reference: red for the fraction made zero by
// quantization, blue for the pruned fraction, over the dark background.
Rgb ZerosColour(double induced, double pruned) {
  auto mix = [](uint8_t base, double f) {
    return static_cast<uint8_t>(std::lround(base + f * (255 - base)));
  };
  return {mix(kBackground[0], Clamp01(induced)), kBackground[1],
          mix(kBackground[2], Clamp01(pruned))};
}

Rgb CellColour(const v1::GetHeatmapResponse& h, int k, HeatmapStyle style,
               const std::vector<int>& palette) {
  switch (style) {
    case HeatmapStyle::kGroups:
      return palette[k] < 0 ? kNoGroupColour : kGroupPalette[palette[k]];
    case HeatmapStyle::kZeros:
      if (h.pruned_size() == h.values_size()) {
        return ZerosColour(h.values(k), h.pruned(k));
      }
      return Viridis(Clamp01(h.values(k)));  // the fraction itself, 0..1
    case HeatmapStyle::kValues:
      break;
  }
  return ValueColour(h, k);
}

// Per cell: bit 0 group changes to the right, bit 1 below.
uint8_t Boundary(const v1::GetHeatmapResponse& h, int i, int j) {
  const int w = h.width();
  const int64_t g = h.groups(i * w + j);
  uint8_t b = 0;
  if (j + 1 < w && h.groups(i * w + j + 1) != g) b |= 1;
  if (i + 1 < h.height() && h.groups((i + 1) * w + j) != g) b |= 2;
  return b;
}

bool WellFormed(const v1::GetHeatmapResponse& h) {
  const int64_t cells = int64_t{h.width()} * h.height();
  return h.width() > 0 && h.height() > 0 && h.values_size() == cells &&
         h.groups_size() == cells;
}

}  // namespace

Rgb ValueColour(const v1::GetHeatmapResponse& h, int k) {
  const double v = h.values(k);
  if (std::isnan(v)) return kNaNColour;
  if (std::isinf(v)) return Viridis(v > 0 ? 1 : 0);
  const double span = h.max() - h.min();
  // Clamped (a cell outside [min, max] would be a malformed reply); every
  // finite cell alike: mid-ramp.
  return Viridis(span > 0 ? (v - h.min()) / span : 0.5);
}

std::string NonFiniteLegend(const v1::GetHeatmapResponse& h,
                            HeatmapStyle style) {
  if (style != HeatmapStyle::kValues) return "";
  int64_t nan = 0, pos = 0, neg = 0;
  for (double v : h.values()) {
    nan += std::isnan(v);
    pos += v == std::numeric_limits<double>::infinity();
    neg += v == -std::numeric_limits<double>::infinity();
  }
  if (nan + pos + neg == 0) return "";
  const int64_t all = nan + pos + neg;
  std::string out =
      absl::StrCat(all, all == 1 ? " cell" : " cells", " not finite:");
  const char* sep = " ";
  for (const auto& [n, what] :
       {std::pair<int64_t, const char*>{nan, "NaN (magenta)"},
        {pos, "+inf (top colour)"},
        {neg, "-inf (bottom colour)"}}) {
    if (n == 0) continue;
    absl::StrAppend(&out, sep, n, " ", what);
    sep = ", ";
  }
  return out;
}

std::vector<int> GroupColourIndices(const v1::GetHeatmapResponse& h) {
  const int w = h.width(), ht = h.height();
  std::vector<int> out(static_cast<size_t>(h.groups_size()), -1);
  if (w <= 0 || ht <= 0 || int64_t{w} * ht != h.groups_size()) return out;
  absl::flat_hash_map<int64_t, int> colour;  // group id -> palette index
  for (int i = 0; i < ht; ++i) {
    for (int j = 0; j < w; ++j) {
      const int k = i * w + j;
      const int64_t g = h.groups(k);
      if (g < 0) continue;
      auto it = colour.find(g);
      if (it == colour.end()) {
        // Colours of the neighbouring groups already coloured (left, up).
        int taken[2] = {-1, -1};
        if (j > 0 && h.groups(k - 1) != g) taken[0] = out[k - 1];
        if (i > 0 && h.groups(k - w) != g) taken[1] = out[k - w];
        const int start = static_cast<int>(g % 10);
        int pick = start;
        for (int step = 0; step < 10; ++step) {
          const int c = (start + step) % 10;
          if (c != taken[0] && c != taken[1]) {
            pick = c;
            break;
          }
        }
        it = colour.emplace(g, pick).first;
      }
      out[k] = it->second;
    }
  }
  return out;
}

HeatmapStyle StyleFor(v1::HeatmapMode mode) {
  switch (mode) {
    case v1::HEATMAP_MODE_GROUP:
      return HeatmapStyle::kGroups;
    case v1::HEATMAP_MODE_ZEROS:
      return HeatmapStyle::kZeros;
    default:
      return HeatmapStyle::kValues;
  }
}

HeatmapLayout LayoutFor(const v1::GetHeatmapResponse& h) {
  HeatmapLayout l;
  l.cell = std::clamp(512 / std::max({h.width(), h.height(), 1}), 1, 16);
  return l;
}

Image RenderHeatmap(const v1::GetHeatmapResponse& h, const std::string& title,
                    HeatmapStyle style) {
  const HeatmapLayout l = LayoutFor(h);
  if (!WellFormed(h)) {
    // An empty tensor: no data cells and no colour scale, only what it is.
    constexpr char kEmpty[] = "empty tensor (a zero dimension): no cells";
    Image img(
        l.x0 + std::max(Image::TextWidth(title), Image::TextWidth(kEmpty)) + 4,
        l.y0 + 16, kBackground);
    img.Text(l.x0, 4, title, kInk);
    img.Text(l.x0, l.y0, kEmpty, kInk);
    return img;
  }
  const bool mixed =
      style == HeatmapStyle::kZeros && h.pruned_size() == h.values_size();
  const std::vector<int> palette = style == HeatmapStyle::kGroups
                                       ? GroupColourIndices(h)
                                       : std::vector<int>();
  const std::string non_finite = NonFiniteLegend(h, style);
  const bool has_nan = std::any_of(h.values().begin(), h.values().end(),
                                   [](double v) { return std::isnan(v); });
  // The legend line: the zeros' colours, or the cells not finite, after a
  // NaN swatch when any are NaN.
  const std::string legend = mixed ? kZerosLegend : non_finite;
  const int legend_x = l.x0 + (has_nan && !mixed ? 10 : 0);
  const int heat_w = h.width() * l.cell, heat_h = h.height() * l.cell;
  const int bar_x = l.x0 + heat_w + 8, bar_h = std::max(heat_h, 64);
  const int label_w = Image::TextWidth("-0.000000e+00");
  const int legend_h = legend.empty() ? 0 : 12;
  const int width = std::max(
      {bar_x + 12 + 6 + label_w + 4, l.x0 + Image::TextWidth(title) + 4,
       legend.empty() ? 0 : legend_x + Image::TextWidth(legend) + 4});
  Image img(width, l.y0 + bar_h + 4 + legend_h, kBackground);
  img.Text(l.x0, 4, title, kInk);
  for (int i = 0; i < h.height(); ++i) {
    for (int j = 0; j < h.width(); ++j) {
      img.Fill(l.x0 + j * l.cell, l.y0 + i * l.cell, l.cell, l.cell,
               CellColour(h, i * h.width() + j, style, palette));
    }
  }
  if (style == HeatmapStyle::kGroups) {
    img.Text(bar_x + 4, l.y0, "GROUPS", kInk);
    return img;
  }
  if (style == HeatmapStyle::kValues && l.cell >= 3) {
    for (int i = 0; i < h.height(); ++i) {
      for (int j = 0; j < h.width(); ++j) {
        const uint8_t b = Boundary(h, i, j);
        const int x = l.x0 + j * l.cell, y = l.y0 + i * l.cell;
        if (b & 1) img.Fill(x + l.cell - 1, y, 1, l.cell, kBoundaryColour);
        if (b & 2) img.Fill(x, y + l.cell - 1, l.cell, 1, kBoundaryColour);
      }
    }
  }
  // The colour bar: top is the maximum.
  for (int y = 0; y < bar_h; ++y) {
    const double f = 1.0 - static_cast<double>(y) / (bar_h - 1);
    img.Fill(bar_x, l.y0 + y, 12, 1, mixed ? ZerosColour(f, 0) : Viridis(f));
  }
  const bool fraction = style == HeatmapStyle::kZeros;
  const double lo = fraction ? 0 : h.min(), hi = fraction ? 1 : h.max();
  img.Text(bar_x + 16, l.y0, absl::StrFormat("%.4g", hi), kInk);
  img.Text(bar_x + 16, l.y0 + bar_h / 2 - 3,
           absl::StrFormat("%.4g", (lo + hi) / 2), kInk);
  img.Text(bar_x + 16, l.y0 + bar_h - 7, absl::StrFormat("%.4g", lo), kInk);
  if (!legend.empty()) {
    if (has_nan && !mixed) img.Fill(l.x0, l.y0 + bar_h + 4, 7, 7, kNaNColour);
    img.Text(legend_x, l.y0 + bar_h + 4, legend, kInk);
  }
  return img;
}

std::string RenderHeatmapTerminal(const v1::GetHeatmapResponse& h,
                                  const std::string& title,
                                  HeatmapStyle style) {
  std::string out = title + "\n";
  if (!WellFormed(h)) {
    return out + "empty tensor (a zero dimension): no cells\n";
  }
  const std::vector<int> palette = style == HeatmapStyle::kGroups
                                       ? GroupColourIndices(h)
                                       : std::vector<int>();
  for (int i = 0; i < h.height(); i += 2) {
    for (int j = 0; j < h.width(); ++j) {
      const Rgb top = CellColour(h, i * h.width() + j, style, palette);
      const Rgb bottom =
          i + 1 < h.height()
              ? CellColour(h, (i + 1) * h.width() + j, style, palette)
              : Rgb{0, 0, 0};
      absl::StrAppend(&out, "\x1b[38;2;", top[0], ";", top[1], ";", top[2],
                      "m\x1b[48;2;", bottom[0], ";", bottom[1], ";", bottom[2],
                      "m\u2580");
    }
    out += "\x1b[0m\n";
  }
  if (style == HeatmapStyle::kZeros && h.pruned_size() == h.values_size()) {
    absl::StrAppend(&out, kZerosLegend, "\n");
  } else if (style == HeatmapStyle::kZeros) {
    absl::StrAppend(&out, "zero fraction: min ",
                    absl::StrFormat("%.6g", h.min()), "  max ",
                    absl::StrFormat("%.6g", h.max()), "\n");
  } else if (style == HeatmapStyle::kValues) {
    absl::StrAppend(&out, "min ", absl::StrFormat("%.6g", h.min()), "  max ",
                    absl::StrFormat("%.6g", h.max()), "\n");
    if (std::string legend = NonFiniteLegend(h, style); !legend.empty()) {
      absl::StrAppend(&out, legend, "\n");
    }
  }
  return out;
}

}  // namespace tensormorph
