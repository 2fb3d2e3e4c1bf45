#pragma once
// Choices named on the command line (--scenario, --place): the index of a name in its
// list, or an Error naming the option and every choice.
#include <ndtcu/error.hpp>

#include <cstddef>
#include <string>
#include <vector>

namespace ndtcu::sim::detail {

/// The index of `name` in `names`; throws Error "`what` 'name' is not one of a, b, c".
inline std::size_t index_of_name(const std::vector<std::string>& names, const std::string& name,
                                 const std::string& what) {
  for (std::size_t k = 0; k < names.size(); ++k) {
    if (names[k] == name) return k;
  }
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
  throw Error(what + " '" + name + "' is not one of " + list);
}

}  // namespace ndtcu::sim::detail
