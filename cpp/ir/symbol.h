// Interned strings for node targets and module types.
//
// Targets are compared on every index lookup, so they are interned once into a process-wide
// table and compared as integers afterwards. The table only grows; a Symbol stays valid for the
// life of the process, which lets graphs built in different bridge sessions share symbols.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace fxopt {

class Symbol {
 public:
  Symbol() = default;
  static Symbol intern(std::string_view text);

  const std::string& str() const;
  uint32_t id() const { return id_; }
  bool empty() const { return id_ == 0; }

  friend bool operator==(Symbol a, Symbol b) { return a.id_ == b.id_; }
  friend auto operator<=>(Symbol a, Symbol b) { return a.id_ <=> b.id_; }

 private:
  explicit Symbol(uint32_t id) : id_(id) {}
  uint32_t id_ = 0;  // 0 is the empty string
};

}  // namespace fxopt

template <>
struct std::hash<fxopt::Symbol> {
  size_t operator()(fxopt::Symbol s) const noexcept { return s.id(); }
};
