// Part of the small C++ program compiled by the "g++" real-program benchmark (see graph.h).
#pragma once
#include <array>
#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

namespace bench {

template <typename T, size_t N> class Matrix {
public:
  Matrix() { data_.fill(T{}); }
  T &operator()(size_t r, size_t c) { return data_[r * N + c]; }
  const T &operator()(size_t r, size_t c) const { return data_[r * N + c]; }
  Matrix operator*(const Matrix &o) const {
    Matrix m;
    for (size_t i = 0; i < N; i++)
      for (size_t k = 0; k < N; k++)
        for (size_t j = 0; j < N; j++) m(i, j) += (*this)(i, k) * o(k, j);
    return m;
  }
  T trace() const {
    T t{};
    for (size_t i = 0; i < N; i++) t += (*this)(i, i);
    return t;
  }

private:
  std::array<T, N * N> data_;
};

struct Shape {
  virtual ~Shape() = default;
  virtual double area() const = 0;
};

std::vector<std::unique_ptr<Shape>> make_shapes(int n);
double total_area(const std::vector<std::unique_ptr<Shape>> &shapes,
                  const std::function<bool(const Shape &)> &keep);

} // namespace bench
