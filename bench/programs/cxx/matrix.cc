// Part of the small C++ program compiled by the "g++" real-program benchmark (see graph.h).
#include "matrix.h"

namespace bench {

namespace {
struct Circle final : Shape {
  explicit Circle(double r) : r_(r) {}
  double area() const override { return 3.14159265358979 * r_ * r_; }
  double r_;
};
struct Rect final : Shape {
  Rect(double w, double h) : w_(w), h_(h) {}
  double area() const override { return w_ * h_; }
  double w_, h_;
};
} // namespace

std::vector<std::unique_ptr<Shape>> make_shapes(int n) {
  std::vector<std::unique_ptr<Shape>> shapes;
  for (int i = 0; i < n; i++) {
    if (i % 2) shapes.push_back(std::make_unique<Circle>(i % 7 + 1));
    else shapes.push_back(std::make_unique<Rect>(i % 5 + 1, i % 3 + 1));
  }
  return shapes;
}

double total_area(const std::vector<std::unique_ptr<Shape>> &shapes,
                  const std::function<bool(const Shape &)> &keep) {
  double total = 0;
  for (const auto &s : shapes)
    if (keep(*s)) total += s->area();
  return total;
}

} // namespace bench
