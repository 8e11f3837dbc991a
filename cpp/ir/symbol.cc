#include "ir/symbol.h"

#include <deque>
#include <mutex>
#include <unordered_map>

namespace fxopt {
namespace {

struct SymbolTable {
  std::mutex mutex;
  std::deque<std::string> texts{std::string()};  // deque: stable references on growth
  std::unordered_map<std::string_view, uint32_t> ids{{std::string_view(), 0}};
};

SymbolTable& table() {
  static SymbolTable* t = new SymbolTable();  // never destroyed: symbols outlive static teardown
  return *t;
}

}  // namespace

Symbol Symbol::intern(std::string_view text) {
  SymbolTable& t = table();
  std::lock_guard lock(t.mutex);
  if (auto it = t.ids.find(text); it != t.ids.end()) return Symbol(it->second);
  auto id = static_cast<uint32_t>(t.texts.size());
  const std::string& stored = t.texts.emplace_back(text);
  t.ids.emplace(stored, id);
  return Symbol(id);
}

const std::string& Symbol::str() const {
  SymbolTable& t = table();
  std::lock_guard lock(t.mutex);
  return t.texts[id_];
}

}  // namespace fxopt
