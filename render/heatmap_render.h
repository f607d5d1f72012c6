// Draws a GetHeatmap reply: a PNG with a colour bar, its numbers and a title;
// or 24-bit colour half blocks for a terminal. Group mode colours groups
// with a categorical palette (colour alone shows the boundaries); zeros mode
// with a reference mixes red (induced) and blue (pruned) zeros.
#ifndef TENSORMORPH_RENDER_HEATMAP_RENDER_H_
#define TENSORMORPH_RENDER_HEATMAP_RENDER_H_

#include <array>
#include <string>
#include <vector>

#include "render/image.h"
#include "tensormorph/v1/tensormorph.pb.h"

namespace tensormorph {

// Where the cells are drawn: cell (i, j) fills
// [x0 + j*cell, x0 + (j+1)*cell) x [y0 + i*cell, y0 + (i+1)*cell).
struct HeatmapLayout {
  int x0 = 4, y0 = 16, cell = 1;
};
HeatmapLayout LayoutFor(const v1::GetHeatmapResponse& h);

// Value styles (mean, absmax, error) draw group boundaries as thin lines on
// a cell's last pixel column (group change to the right) and last pixel row
// (change below) when cells are at least 3 pixels; groups and zeros do not.
inline constexpr Rgb kBoundaryColour = {255, 255, 255};

// The group palette (Tableau 10), and grey for cells without a group. The
// web inspector draws with the same colours and the same rule.
inline constexpr std::array<Rgb, 10> kGroupPalette = {{{0x4e, 0x79, 0xa7},
                                                       {0xf2, 0x8e, 0x2b},
                                                       {0xe1, 0x57, 0x59},
                                                       {0x76, 0xb7, 0xb2},
                                                       {0x59, 0xa1, 0x4f},
                                                       {0xed, 0xc9, 0x48},
                                                       {0xb0, 0x7a, 0xa1},
                                                       {0xff, 0x9d, 0xa7},
                                                       {0x9c, 0x75, 0x5f},
                                                       {0xba, 0xb0, 0xac}}};
inline constexpr Rgb kNoGroupColour = {0x80, 0x80, 0x80};

// The palette index of each cell (row-major, height * width), -1 for group
// -1 (kNoGroupColour). Cells are scanned row-major; the first time a group
// id is seen it takes the first index, starting at (id mod 10) and cycling
// upward, whose colour is not already that of the group of its left or its
// upper neighbour cell (neighbours of the same group ignored); later cells
// of that group keep it. So side-by-side groups of a grid differ in colour.
std::vector<int> GroupColourIndices(const v1::GetHeatmapResponse& h);

// What the values mean, hence how they are coloured: a ramp between min and
// max (mean, absmax, error), the group palette, or zeros (a ramp of the
// fraction 0..1; with a reference, red = induced, blue = pruned).
enum class HeatmapStyle { kValues, kGroups, kZeros };
HeatmapStyle StyleFor(v1::HeatmapMode mode);

// Value styles: min and max are the finite cells' range (GetHeatmapResponse),
// so finite cells take the ramp between them; a +inf cell the ramp's top
// colour, a -inf cell its bottom colour, and a NaN cell this magenta, which
// is on no ramp. The web inspector draws with the same colours.
inline constexpr Rgb kNaNColour = {0xff, 0x00, 0xff};

// The colour of cell k (row-major) of a value style's ramp, by the rule
// above.
Rgb ValueColour(const v1::GetHeatmapResponse& h, int k);

// For a value style with cells that are not finite, the legend saying how
// many, e.g. "3 cells not finite: 2 NaN (magenta), 1 +inf (top colour)";
// else "" (other styles' values are always finite).
std::string NonFiniteLegend(const v1::GetHeatmapResponse& h,
                            HeatmapStyle style);

// With cells that are not finite, NonFiniteLegend under the cells, after a
// magenta swatch when some are NaN.
Image RenderHeatmap(const v1::GetHeatmapResponse& h, const std::string& title,
                    HeatmapStyle style);

// ANSI 24-bit colour, two cell rows per text line ("▀" fg = top, bg = bottom),
// then the range ("min X  max Y", finite) and NonFiniteLegend on its own line
// when it is not empty.
std::string RenderHeatmapTerminal(const v1::GetHeatmapResponse& h,
                                  const std::string& title, HeatmapStyle style);

}  // namespace tensormorph

#endif  // TENSORMORPH_RENDER_HEATMAP_RENDER_H_
