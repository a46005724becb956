// Part of the small C++ program compiled by the "g++" real-program benchmark (see graph.h).
#include "text.h"

#include <algorithm>
#include <cctype>
#include <sstream>

namespace bench {

std::vector<std::string> split_words(const std::string &text) {
  std::vector<std::string> words;
  std::string word;
  for (char c : text) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      word += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    } else if (!word.empty()) {
      words.push_back(std::move(word));
      word.clear();
    }
  }
  if (!word.empty()) words.push_back(word);
  return words;
}

std::unordered_map<std::string, size_t> count_words(const std::vector<std::string> &words) {
  std::unordered_map<std::string, size_t> counts;
  for (const auto &w : words) counts[w]++;
  return counts;
}

std::string most_common(const std::unordered_map<std::string, size_t> &counts, size_t n) {
  std::vector<std::pair<std::string, size_t>> items(counts.begin(), counts.end());
  std::sort(items.begin(), items.end(), [](const auto &a, const auto &b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  std::ostringstream out;
  for (size_t i = 0; i < std::min(n, items.size()); i++)
    out << (i ? " " : "") << items[i].first << ":" << items[i].second;
  return out.str();
}

} // namespace bench
