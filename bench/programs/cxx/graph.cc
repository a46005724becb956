// Part of the small C++ program compiled by the "g++" real-program benchmark (see graph.h).
#include "graph.h"

#include <limits>
#include <queue>
#include <utility>

namespace bench {

Graph::Graph(int nodes) : adj_(static_cast<size_t>(nodes)) {}

void Graph::add_edge(int from, int to, double weight) {
  adj_[static_cast<size_t>(from)].push_back(Edge{to, weight});
}

std::vector<double> Graph::shortest_paths(int source) const {
  std::vector<double> dist(adj_.size(), std::numeric_limits<double>::infinity());
  using Item = std::pair<double, int>;
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> queue;
  dist[static_cast<size_t>(source)] = 0;
  queue.push({0.0, source});
  while (!queue.empty()) {
    auto [d, u] = queue.top();
    queue.pop();
    if (d > dist[static_cast<size_t>(u)]) continue;
    for (const Edge &e : adj_[static_cast<size_t>(u)]) {
      double nd = d + e.weight;
      if (nd < dist[static_cast<size_t>(e.to)]) {
        dist[static_cast<size_t>(e.to)] = nd;
        queue.push({nd, e.to});
      }
    }
  }
  return dist;
}

std::map<std::string, int> Graph::degree_histogram() const {
  std::map<std::string, int> hist;
  for (const auto &edges : adj_) hist["degree-" + std::to_string(edges.size())]++;
  return hist;
}

} // namespace bench
