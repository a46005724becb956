// The small C++ program compiled by the "g++" real-program benchmark (see graph.h). bench/run.py
// builds it with g++ under each allocator and runs it once to check that the build works.
#include "graph.h"
#include "matrix.h"
#include "text.h"

#include <cstdio>
#include <iostream>
#include <numeric>
#include <set>

int main() {
  bench::Graph g(2000);
  for (int i = 0; i < 2000; i++)
    for (int k = 1; k <= 4; k++) g.add_edge(i, (i * 7 + k * 13) % 2000, 1.0 + (i + k) % 5);
  std::vector<double> d = g.shortest_paths(0);
  double sum = 0;
  for (double x : d)
    if (x < 1e300) sum += x;

  std::string text;
  for (int i = 0; i < 5000; i++) text += "word" + std::to_string(i % 37) + " ";
  auto counts = bench::count_words(bench::split_words(text));

  bench::Matrix<long, 8> a, b;
  for (size_t i = 0; i < 8; i++)
    for (size_t j = 0; j < 8; j++) a(i, j) = b(j, i) = static_cast<long>(i + j);
  auto shapes = bench::make_shapes(100);
  double area = bench::total_area(shapes, [](const bench::Shape &s) { return s.area() > 4; });

  std::set<int> primes;
  for (int n = 2; n < 2000; n++) {
    bool p = true;
    for (int q : primes) {
      if (q * q > n) break;
      if (n % q == 0) { p = false; break; }
    }
    if (p) primes.insert(n);
  }
  std::cout << "RESULT cxx time=0 paths=" << sum << " words=" << counts.size()
            << " top=" << bench::most_common(counts, 1) << " trace=" << (a * b).trace()
            << " area=" << area << " primes=" << primes.size()
            << " hist=" << g.degree_histogram().size() << "\n";
  return 0;
}
