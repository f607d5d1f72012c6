#include "render/image.h"

#include <png.h>

#include <algorithm>
#include <cctype>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace tensormorph {
namespace {

// Viridis at nine evenly spaced points (matplotlib's table), interpolated.
constexpr Rgb kViridis[9] = {{68, 1, 84},    {71, 44, 122},  {59, 81, 139},
                             {44, 113, 142}, {33, 144, 141}, {39, 173, 129},
                             {92, 200, 99},  {170, 220, 50}, {253, 231, 37}};

// 5x7 glyphs, one byte per row, bit 4 the leftmost pixel.
struct Glyph {
  char c;
  uint8_t rows[7];
};
constexpr Glyph kFont[] = {
    {'0', {14, 17, 19, 21, 25, 17, 14}}, {'1', {4, 12, 4, 4, 4, 4, 14}},
    {'2', {14, 17, 1, 2, 4, 8, 31}},     {'3', {31, 2, 4, 2, 1, 17, 14}},
    {'4', {2, 6, 10, 18, 31, 2, 2}},     {'5', {31, 16, 30, 1, 1, 17, 14}},
    {'6', {6, 8, 16, 30, 17, 17, 14}},   {'7', {31, 1, 2, 4, 8, 8, 8}},
    {'8', {14, 17, 17, 14, 17, 17, 14}}, {'9', {14, 17, 17, 15, 1, 2, 12}},
    {'A', {14, 17, 17, 31, 17, 17, 17}}, {'B', {30, 17, 17, 30, 17, 17, 30}},
    {'C', {14, 17, 16, 16, 16, 17, 14}}, {'D', {28, 18, 17, 17, 17, 18, 28}},
    {'E', {31, 16, 16, 30, 16, 16, 31}}, {'F', {31, 16, 16, 30, 16, 16, 16}},
    {'G', {14, 17, 16, 23, 17, 17, 15}}, {'H', {17, 17, 17, 31, 17, 17, 17}},
    {'I', {14, 4, 4, 4, 4, 4, 14}},      {'J', {7, 2, 2, 2, 2, 18, 12}},
    {'K', {17, 18, 20, 24, 20, 18, 17}}, {'L', {16, 16, 16, 16, 16, 16, 31}},
    {'M', {17, 27, 21, 21, 17, 17, 17}}, {'N', {17, 17, 25, 21, 19, 17, 17}},
    {'O', {14, 17, 17, 17, 17, 17, 14}}, {'P', {30, 17, 17, 30, 16, 16, 16}},
    {'Q', {14, 17, 17, 17, 21, 18, 13}}, {'R', {30, 17, 17, 30, 20, 18, 17}},
    {'S', {15, 16, 16, 14, 1, 1, 30}},   {'T', {31, 4, 4, 4, 4, 4, 4}},
    {'U', {17, 17, 17, 17, 17, 17, 14}}, {'V', {17, 17, 17, 17, 17, 10, 4}},
    {'W', {17, 17, 17, 21, 21, 21, 10}}, {'X', {17, 17, 10, 4, 10, 17, 17}},
    {'Y', {17, 17, 17, 10, 4, 4, 4}},    {'Z', {31, 1, 2, 4, 8, 16, 31}},
    {'.', {0, 0, 0, 0, 0, 12, 12}},      {',', {0, 0, 0, 0, 12, 4, 8}},
    {'-', {0, 0, 0, 31, 0, 0, 0}},       {'+', {0, 4, 4, 31, 4, 4, 0}},
    {'_', {0, 0, 0, 0, 0, 0, 31}},       {':', {0, 12, 12, 0, 12, 12, 0}},
    {'/', {0, 1, 2, 4, 8, 16, 0}},       {'=', {0, 0, 31, 0, 31, 0, 0}},
    {'[', {14, 8, 8, 8, 8, 8, 14}},      {']', {14, 2, 2, 2, 2, 2, 14}},
    {'(', {2, 4, 8, 8, 8, 4, 2}},        {')', {8, 4, 2, 2, 2, 4, 8}},
    {'%', {24, 25, 2, 4, 8, 19, 3}},     {'*', {0, 4, 21, 14, 21, 4, 0}},
};

const uint8_t* GlyphOf(char c) {
  c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (const Glyph& g : kFont) {
    if (g.c == c) return g.rows;
  }
  return nullptr;  // space and anything else: blank
}

}  // namespace

Rgb Viridis(double t) {
  if (std::isnan(t)) return {128, 128, 128};
  t = std::clamp(t, 0.0, 1.0) * 8;
  const int i = std::min(7, static_cast<int>(t));
  const double f = t - i;
  Rgb out;
  for (int k = 0; k < 3; ++k) {
    out[k] = static_cast<uint8_t>(
        std::lround(kViridis[i][k] * (1 - f) + kViridis[i + 1][k] * f));
  }
  return out;
}

Image::Image(int width, int height, Rgb bg) : width_(width), height_(height) {
  rgb_.resize(static_cast<size_t>(width) * height * 3);
  for (size_t i = 0; i < rgb_.size(); i += 3) {
    rgb_[i] = bg[0];
    rgb_[i + 1] = bg[1];
    rgb_[i + 2] = bg[2];
  }
}

void Image::Set(int x, int y, Rgb c) {
  if (x < 0 || y < 0 || x >= width_ || y >= height_) return;
  uint8_t* p = &rgb_[(static_cast<size_t>(y) * width_ + x) * 3];
  p[0] = c[0];
  p[1] = c[1];
  p[2] = c[2];
}

Rgb Image::Get(int x, int y) const {
  const uint8_t* p = &rgb_[(static_cast<size_t>(y) * width_ + x) * 3];
  return {p[0], p[1], p[2]};
}

void Image::Fill(int x, int y, int w, int h, Rgb c) {
  for (int j = y; j < y + h; ++j) {
    for (int i = x; i < x + w; ++i) Set(i, j, c);
  }
}

int Image::Text(int x, int y, const std::string& text, Rgb c) {
  for (size_t k = 0; k < text.size(); ++k) {
    if (const uint8_t* g = GlyphOf(text[k])) {
      for (int r = 0; r < 7; ++r) {
        for (int b = 0; b < 5; ++b) {
          if (g[r] & (16 >> b)) Set(x + static_cast<int>(k) * 6 + b, y + r, c);
        }
      }
    }
  }
  return TextWidth(text);
}

absl::StatusOr<std::string> Image::EncodePng() const {
  std::string out;
  png_structp png =
      png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  if (png == nullptr || info == nullptr || setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    return absl::InternalError("libpng failed encoding an image");
  }
  // Into memory: the HTTP gateway sends the bytes, the CLI writes them.
  png_set_write_fn(
      png, &out,
      +[](png_structp p, png_bytep data, png_size_t n) {
        static_cast<std::string*>(png_get_io_ptr(p))
            ->append(reinterpret_cast<const char*>(data), n);
      },
      +[](png_structp) {});
  png_set_IHDR(png, info, width_, height_, 8, PNG_COLOR_TYPE_RGB,
               PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  for (int y = 0; y < height_; ++y) {
    png_write_row(
        png, const_cast<png_bytep>(&rgb_[static_cast<size_t>(y) * width_ * 3]));
  }
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

}  // namespace tensormorph
