// Part of the small C++ program that bench/run.py compiles with g++ (the "g++" real program).
// Its content does not matter much; it uses the standard containers, templates and lambdas that
// make the compiler allocate heavily (cc1plus is one of the biggest malloc users on a machine).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace bench {

struct Edge {
  int to;
  double weight;
};

class Graph {
public:
  explicit Graph(int nodes);
  void add_edge(int from, int to, double weight);
  std::vector<double> shortest_paths(int source) const;
  std::map<std::string, int> degree_histogram() const;
  int size() const { return static_cast<int>(adj_.size()); }

private:
  std::vector<std::vector<Edge>> adj_;
};

} // namespace bench
