// A small RGB canvas for the pictures of the CLI and the HTTP gateway: a
// perceptual colormap, a 5x7 pixel font for titles and colour-bar numbers, and
// PNG output (libpng).
#ifndef TENSORMORPH_RENDER_IMAGE_H_
#define TENSORMORPH_RENDER_IMAGE_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tensormorph {

using Rgb = std::array<uint8_t, 3>;

// Viridis, t in [0, 1] (clamped; NaN maps to grey).
Rgb Viridis(double t);

class Image {
 public:
  Image(int width, int height, Rgb background);
  int width() const { return width_; }
  int height() const { return height_; }
  void Set(int x, int y, Rgb c);
  Rgb Get(int x, int y) const;
  void Fill(int x, int y, int w, int h, Rgb c);
  // Draws text with its top-left at (x, y); lowercase renders as uppercase.
  // Returns the width in pixels.
  int Text(int x, int y, const std::string& text, Rgb c);
  static int TextWidth(const std::string& text) {
    return static_cast<int>(text.size()) * 6;
  }

  // The image as PNG bytes (a file of them is the CLI's OutputFile's to
  // write). Errors: INTERNAL when libpng fails.
  absl::StatusOr<std::string> EncodePng() const;

 private:
  int width_, height_;
  std::vector<uint8_t> rgb_;
};

}  // namespace tensormorph

#endif  // TENSORMORPH_RENDER_IMAGE_H_
