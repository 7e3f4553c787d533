// Overload{lambdas...}: one visitor of a std::variant from a lambda per alternative.
#pragma once

namespace shardguard {

template <typename... Ts>
struct Overload : Ts... {
  using Ts::operator()...;
};
template <typename... Ts>
Overload(Ts...) -> Overload<Ts...>;

}  // namespace shardguard
