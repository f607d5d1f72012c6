// Draws a GetHeatmap reply: a PNG with a colour bar, its numbers and a title,
// group boundaries as thin white lines; or 24-bit colour half blocks for a
// terminal.
#ifndef TENSORMORPH_CLIENT_RENDER_HEATMAP_RENDER_H_
#define TENSORMORPH_CLIENT_RENDER_HEATMAP_RENDER_H_

#include <string>

#include "client/render/image.h"
#include "tensormorph/v1/tensormorph.pb.h"

namespace tensormorph {

// Where the cells are drawn: cell (i, j) fills
// [x0 + j*cell, x0 + (j+1)*cell) x [y0 + i*cell, y0 + (i+1)*cell).
struct HeatmapLayout {
  int x0 = 4, y0 = 16, cell = 1;
};
HeatmapLayout LayoutFor(const v1::GetHeatmapResponse& h);

inline constexpr Rgb kBoundaryColour = {255, 255, 255};

// Boundaries are drawn on a cell's last pixel column (group change to the
// right) and last pixel row (change below) when cells are at least 3 pixels.
Image RenderHeatmap(const v1::GetHeatmapResponse& h, const std::string& title,
                    bool by_group);

// ANSI 24-bit colour, two cell rows per text line ("▀" fg = top, bg = bottom).
std::string RenderHeatmapTerminal(const v1::GetHeatmapResponse& h,
                                  const std::string& title, bool by_group);

}  // namespace tensormorph

#endif  // TENSORMORPH_CLIENT_RENDER_HEATMAP_RENDER_H_
