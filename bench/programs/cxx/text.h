// Part of the small C++ program compiled by the "g++" real-program benchmark (see graph.h).
#pragma once
#include <string>
#include <unordered_map>
#include <vector>

namespace bench {

std::vector<std::string> split_words(const std::string &text);
std::unordered_map<std::string, size_t> count_words(const std::vector<std::string> &words);
std::string most_common(const std::unordered_map<std::string, size_t> &counts, size_t n);

} // namespace bench
