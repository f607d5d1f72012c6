#include "client/render/heatmap_render.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tensormorph {
namespace {

Rgb CellColour(const v1::GetHeatmapResponse& h, int k, bool by_group) {
  if (by_group) {
    const int64_t g = h.groups(k);
    if (g < 0) return {128, 128, 128};
    // Neighbouring groups get distant colours (golden-ratio steps).
    return Viridis(std::fmod(static_cast<double>(g) * 0.6180339887, 1.0));
  }
  const double span = h.max() - h.min();
  return Viridis(span > 0 ? (h.values(k) - h.min()) / span : 0.5);
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

}  // namespace

HeatmapLayout LayoutFor(const v1::GetHeatmapResponse& h) {
  HeatmapLayout l;
  l.cell = std::clamp(512 / std::max({h.width(), h.height(), 1}), 1, 16);
  return l;
}

Image RenderHeatmap(const v1::GetHeatmapResponse& h, const std::string& title,
                    bool by_group) {
  const HeatmapLayout l = LayoutFor(h);
  if (h.width() == 0 || h.height() == 0) {
    // An empty tensor: no data cells and no colour scale, only what it is.
    constexpr char kEmpty[] = "empty tensor (a zero dimension): no cells";
    Image img(
        l.x0 + std::max(Image::TextWidth(title), Image::TextWidth(kEmpty)) + 4,
        l.y0 + 16, {24, 24, 24});
    img.Text(l.x0, 4, title, {230, 230, 230});
    img.Text(l.x0, l.y0, kEmpty, {230, 230, 230});
    return img;
  }
  const int heat_w = h.width() * l.cell, heat_h = h.height() * l.cell;
  const int bar_x = l.x0 + heat_w + 8, bar_h = std::max(heat_h, 64);
  const int label_w = Image::TextWidth("-0.000000e+00");
  const int width = std::max(bar_x + 12 + 6 + label_w + 4,
                             l.x0 + Image::TextWidth(title) + 4);
  Image img(width, l.y0 + bar_h + 4, {24, 24, 24});
  img.Text(l.x0, 4, title, {230, 230, 230});
  for (int i = 0; i < h.height(); ++i) {
    for (int j = 0; j < h.width(); ++j) {
      img.Fill(l.x0 + j * l.cell, l.y0 + i * l.cell, l.cell, l.cell,
               CellColour(h, i * h.width() + j, by_group));
    }
  }
  if (l.cell >= 3) {
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
    img.Fill(bar_x, l.y0 + y, 12, 1,
             Viridis(1.0 - static_cast<double>(y) / (bar_h - 1)));
  }
  const double lo = by_group ? 0 : h.min(), hi = by_group ? 1 : h.max();
  const std::string top = by_group ? "GROUPS" : absl::StrFormat("%.4g", hi);
  const std::string mid =
      by_group ? "" : absl::StrFormat("%.4g", (lo + hi) / 2);
  const std::string bottom = by_group ? "" : absl::StrFormat("%.4g", lo);
  img.Text(bar_x + 16, l.y0, top, {230, 230, 230});
  img.Text(bar_x + 16, l.y0 + bar_h / 2 - 3, mid, {230, 230, 230});
  img.Text(bar_x + 16, l.y0 + bar_h - 7, bottom, {230, 230, 230});
  return img;
}

std::string RenderHeatmapTerminal(const v1::GetHeatmapResponse& h,
                                  const std::string& title, bool by_group) {
  std::string out = title + "\n";
  if (h.width() == 0 || h.height() == 0) {
    return out + "empty tensor (a zero dimension): no cells\n";
  }
  for (int i = 0; i < h.height(); i += 2) {
    for (int j = 0; j < h.width(); ++j) {
      const Rgb top = CellColour(h, i * h.width() + j, by_group);
      const Rgb bottom = i + 1 < h.height()
                             ? CellColour(h, (i + 1) * h.width() + j, by_group)
                             : Rgb{0, 0, 0};
      absl::StrAppend(&out, "\x1b[38;2;", top[0], ";", top[1], ";", top[2],
                      "m\x1b[48;2;", bottom[0], ";", bottom[1], ";", bottom[2],
                      "m\u2580");
    }
    out += "\x1b[0m\n";
  }
  if (!by_group) {
    absl::StrAppend(&out, "min ", absl::StrFormat("%.6g", h.min()), "  max ",
                    absl::StrFormat("%.6g", h.max()), "\n");
  }
  return out;
}

}  // namespace tensormorph
